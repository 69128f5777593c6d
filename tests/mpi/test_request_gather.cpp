// Request gathers (comm.gather_protocol: request) under mpirun: every byte of an owner's region
// arrives as the owner holds it and as a one-sided get reads it — unaligned offsets and counts,
// counts of many chunks, more chunks than comm.max_inflight, pushes crossing in both directions
// meanwhile — and a request outside the owner's region fails naming the owner. ctest runs these
// with UCX's shared memory (mpi/np*) and over TCP (mpi/np2_tcp: UCX_TLS=tcp,self).
#include <mpi.h>

#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "mpi_test_support.h"
#include "odc/distributed/comm/push_ledger.h"
#include "odc/distributed/transport/ucx/ucx_transport.h"

using namespace odc;
using distributed::GatherProtocol;
using test::mpi_rank;
using test::mpi_world;

namespace {

constexpr std::int64_t kFloats = 100003;  // odd: no chunk boundary lines up with the end

// Arbitrary bits per (owner, element): NaNs with payloads, denormals, negative zeros included,
// so anything but a byte-exact copy shows.
std::uint32_t pattern(int owner, std::int64_t i) {
  std::uint64_t z = static_cast<std::uint64_t>(owner) * 0x9E3779B97F4A7C15ULL + static_cast<std::uint64_t>(i) + 1;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return static_cast<std::uint32_t>(z ^ (z >> 31));
}

void fill_exposed(distributed::UcxTransport& transport) {
  auto exposed = transport.exposed();
  for (std::int64_t i = 0; i < kFloats; ++i) {
    const std::uint32_t bits = pattern(transport.rank(), i);
    std::memcpy(&exposed[static_cast<std::size_t>(i)], &bits, sizeof(bits));
  }
}

// (offset, count) pairs: whole region, single floats, unaligned starts and ends, chunk-sized and
// chunk-straddling pieces, the very end.
std::vector<std::pair<std::int64_t, std::int64_t>> ranges(std::int64_t chunk_floats) {
  return {{0, kFloats},
          {1, 1},
          {3, chunk_floats - 1},
          {chunk_floats + 1, 5 * chunk_floats + 3},
          {7, chunk_floats},
          {kFloats - 7, 7},
          {12345, 50001},
          {kFloats - 1, 1}};
}

struct Gathered {
  std::vector<std::vector<std::uint32_t>> pieces;  // per (peer, range)
};

// Starts every range from every peer into one completion (far more chunks than max_inflight), then
// waits once.
Gathered gather_all(distributed::UcxTransport& transport, std::int64_t chunk_floats, const char* what) {
  const int world = transport.world_size();
  const auto rs = ranges(chunk_floats);
  Gathered out;
  distributed::Completion done(world);
  for (int peer = 0; peer < world; ++peer) {
    for (const auto& [offset, count] : rs) {
      out.pieces.emplace_back(static_cast<std::size_t>(count), 0xDEADBEEFu);  // sentinel
      transport.get(peer, offset, reinterpret_cast<float*>(out.pieces.back().data()), count, done);
    }
  }
  transport.wait(done, what);
  return out;
}

void check_owner_bytes(const Gathered& got, int world, std::int64_t chunk_floats) {
  const auto rs = ranges(chunk_floats);
  std::size_t k = 0;
  for (int peer = 0; peer < world; ++peer) {
    for (const auto& [offset, count] : rs) {
      const auto& piece = got.pieces[k++];
      std::int64_t wrong = 0, first = -1;
      for (std::int64_t i = 0; i < count; ++i) {
        if (piece[static_cast<std::size_t>(i)] != pattern(peer, offset + i)) {
          ++wrong;
          if (first < 0) first = i;
        }
      }
      INFO("owner " << peer << ", offset " << offset << ", count " << count << ": first wrong element " << first);
      CHECK(wrong == 0);
    }
  }
}

}  // namespace

TEST_CASE("request gathers return the owner's bytes exactly, as gets do, with pushes crossing them",
          "[mpi][ucx][request]") {
  const int world = mpi_world();
  const int rank = mpi_rank();
  const bool direct_load = GENERATE(true, false);  // false: our own shard goes through UCX as well
  distributed::TransportOptions options;
  options.chunk_bytes = 16 * 1024;  // 4096 floats: the region is 25 chunks
  options.network_chunk_bytes = options.chunk_bytes;  // the same over TCP (mpi/np2_tcp)
  options.max_inflight = 3;
  options.direct_load = direct_load;
  options.gather_protocol = GatherProtocol::request;
  options.timeout_s = 60;
  const std::int64_t chunk_floats = options.chunk_bytes / 4;
  auto group = test::world_group();
  distributed::PushLedger ledger(*group);
  distributed::UcxTransport transport(*group, kFloats, options);
  fill_exposed(transport);
  for (int peer = 0; peer < world; ++peer) {
    if (peer != rank || !direct_load) CHECK(transport.gather_protocol(peer) == GatherProtocol::request);
  }
  std::vector<double> received(static_cast<std::size_t>(kFloats), 0.0);
  transport.set_receiver([&](const distributed::PushHeader& h, const float* data) {
    for (std::int64_t i = 0; i < h.count; ++i) received[static_cast<std::size_t>(h.offset + i)] += data[i];
    ledger.applied(h.from, 1);  // last: the wait's return means the data is in
  });
  MPI_Barrier(MPI_COMM_WORLD);  // every region is filled before anybody reads

  // Pushes to every owner in flight while the gathers run, both ways.
  std::vector<float> gradient(static_cast<std::size_t>(kFloats));
  for (std::int64_t i = 0; i < kFloats; ++i) gradient[static_cast<std::size_t>(i)] = static_cast<float>(i % 1000 + rank);
  distributed::Completion pushes(world);
  std::vector<std::int64_t> sent(static_cast<std::size_t>(world), 0);
  for (int peer = 0; peer < world; ++peer) {
    sent[static_cast<std::size_t>(peer)] = transport.push(peer, 0, 0, gradient.data(), kFloats, pushes);
  }
  const Gathered requested = gather_all(transport, chunk_floats, "request gather");
  check_owner_bytes(requested, world, chunk_floats);

  transport.wait(pushes, "test push");
  std::vector<std::int64_t> expected(static_cast<std::size_t>(world));
  MPI_Alltoall(sent.data(), 1, MPI_INT64_T, expected.data(), 1, MPI_INT64_T, MPI_COMM_WORLD);
  ledger.wait(expected, options.timeout_s, {}, "test receive");
  const double rank_sum = world * (world - 1) / 2.0;
  for (std::int64_t i = 0; i < kFloats; i += 97) {
    REQUIRE(received[static_cast<std::size_t>(i)] == world * static_cast<double>(i % 1000) + rank_sum);
  }

  // The same ranges by one-sided gets: the same bits.
  transport.set_gather_protocol(GatherProtocol::get);
  for (int peer = 0; peer < world; ++peer) CHECK(transport.gather_protocol(peer) == GatherProtocol::get);
  const Gathered got = gather_all(transport, chunk_floats, "get gather");
  REQUIRE(got.pieces.size() == requested.pieces.size());
  for (std::size_t k = 0; k < got.pieces.size(); ++k) CHECK(got.pieces[k] == requested.pieces[k]);
  MPI_Barrier(MPI_COMM_WORLD);  // nobody leaves while a peer still reads its region
}

TEST_CASE("auto gathers by get from mapped owners and by request from the others", "[mpi][ucx][request]") {
  const int world = mpi_world();
  distributed::TransportOptions options;
  options.chunk_bytes = 64 * 1024;
  options.network_chunk_bytes = options.chunk_bytes;
  auto group = test::world_group();
  distributed::UcxTransport transport(*group, kFloats, options);
  fill_exposed(transport);
  for (int peer = 0; peer < world; ++peer) {
    const GatherProtocol expected = transport.mapped(peer) ? GatherProtocol::get : GatherProtocol::request;
    CHECK(transport.gather_protocol(peer) == expected);
  }
  CHECK(transport.mapped(transport.rank()));
  MPI_Barrier(MPI_COMM_WORLD);
  const Gathered got = gather_all(transport, options.chunk_bytes / 4, "auto gather");
  check_owner_bytes(got, world, options.chunk_bytes / 4);
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("a request outside the owner's region fails naming the owner", "[mpi][ucx][request]") {
  const int world = mpi_world();
  const int rank = mpi_rank();
  distributed::TransportOptions options;
  options.direct_load = false;  // one rank: the request goes to ourselves through UCX
  options.gather_protocol = GatherProtocol::request;
  options.timeout_s = 30;
  auto group = test::world_group();
  distributed::UcxTransport transport(*group, 1024, options);
  const int owner = (rank + 1) % world;
  std::vector<float> dest(64);
  distributed::Completion done(world);
  transport.get(owner, 1000, dest.data(), 64, done);  // 1000 + 64 > 1024
  CHECK_THROWS_WITH(transport.wait(done, "the test's bad gather"),
                    Catch::Contains("the test's bad gather failed") &&
                        Catch::Contains("request gather from rank " + std::to_string(owner)));
  MPI_Barrier(MPI_COMM_WORLD);
}
