// UcxTransport under mpirun: one-sided gets read the owners' exposed memory, pushes reach the
// receivers intact, and a missing peer is reported by name after the timeout instead of hanging.
#include <mpi.h>

#include <numeric>

#include <catch2/catch.hpp>

#include "mpi_test_support.h"
#include "odc/distributed/comm/push_ledger.h"
#include "odc/distributed/transport/ucx/ucx_transport.h"

using namespace odc;
using test::mpi_rank;
using test::mpi_world;

TEST_CASE("gets read every peer's exposed region and pushes arrive whole", "[mpi][ucx]") {
  const int world = mpi_world();
  const int rank = mpi_rank();
  constexpr std::int64_t kFloats = 300000;  // > 1 chunk of 1 MiB: exercises chunking
  distributed::TransportOptions options;
  options.chunk_bytes = 256 * 1024;
  options.network_chunk_bytes = options.chunk_bytes;  // the same chunks over TCP (mpi/np2_tcp)
  auto group = test::world_group();
  distributed::PushLedger ledger(*group);
  distributed::UcxTransport transport(*group, kFloats, options);
  auto exposed = transport.exposed();
  for (std::int64_t i = 0; i < kFloats; ++i) exposed[static_cast<std::size_t>(i)] = static_cast<float>(rank * 1000000 + i);
  std::vector<double> received(static_cast<std::size_t>(kFloats), 0.0);
  std::vector<std::int64_t> calls(static_cast<std::size_t>(world), 0);
  transport.set_receiver([&](const distributed::PushHeader& h, const float* data) {
    for (std::int64_t i = 0; i < h.count; ++i) received[static_cast<std::size_t>(h.offset + i)] += data[i];
    ++calls[static_cast<std::size_t>(h.from)];
    ledger.applied(h.from, 1);  // last: the wait's return means the data is in
  });
  MPI_Barrier(MPI_COMM_WORLD);

  distributed::Completion gets(world);
  std::vector<float> pulled(static_cast<std::size_t>(kFloats * world));
  for (int peer = 0; peer < world; ++peer) {
    transport.get(peer, 0, pulled.data() + peer * kFloats, kFloats, gets);
  }
  transport.wait(gets, "test gather");
  for (int peer = 0; peer < world; ++peer) {
    for (std::int64_t i = 0; i < kFloats; i += 997) {
      REQUIRE(pulled[static_cast<std::size_t>(peer * kFloats + i)] == static_cast<float>(peer * 1000000 + i));
    }
  }

  std::vector<float> gradient(static_cast<std::size_t>(kFloats));
  std::iota(gradient.begin(), gradient.end(), static_cast<float>(rank));
  distributed::Completion pushes(world);
  for (int peer = 0; peer < world; ++peer) transport.push(peer, 0, 0, gradient.data(), kFloats, pushes);
  transport.wait(pushes, "test push");
  const std::int64_t chunks = (kFloats * 4 + options.chunk_bytes - 1) / options.chunk_bytes;
  ledger.wait(std::vector<std::int64_t>(static_cast<std::size_t>(world), chunks), options.timeout_s, {}, "test receive");
  MPI_Barrier(MPI_COMM_WORLD);
  // Every rank pushed iota(rank) to everyone: element i sums to world*i + sum(ranks).
  const double rank_sum = world * (world - 1) / 2.0;
  for (std::int64_t i = 0; i < kFloats; i += 991) {
    REQUIRE(received[static_cast<std::size_t>(i)] == Approx(world * static_cast<double>(i) + rank_sum));
  }
  for (int peer = 0; peer < world; ++peer) CHECK(calls[static_cast<std::size_t>(peer)] == chunks);
  CHECK(transport.progress_cpu_seconds() >= 0.0);
}

TEST_CASE("messages to a peer over the network are comm.network_chunk_bytes long", "[mpi][ucx]") {
  // 1.2 MB per push: 19 messages of 64 KiB to a peer on this host (mapped, no slots configured),
  // 5 of 256 KiB to a peer reached over the network (mpi/np2_tcp: every peer but ourselves).
  const int world = mpi_world();
  constexpr std::int64_t kFloats = 300000;
  distributed::TransportOptions options;
  options.chunk_bytes = 64 * 1024;
  options.network_chunk_bytes = 256 * 1024;
  auto group = test::world_group();
  distributed::PushLedger ledger(*group);
  distributed::UcxTransport transport(*group, kFloats, options);
  std::vector<std::int64_t> arrived(static_cast<std::size_t>(world), 0);
  transport.set_receiver([&](const distributed::PushHeader& h, const float*) {
    ++arrived[static_cast<std::size_t>(h.from)];
    ledger.applied(h.from, 1);
  });
  MPI_Barrier(MPI_COMM_WORLD);
  const std::vector<float> gradient(static_cast<std::size_t>(kFloats), 1.0f);
  distributed::Completion pushes(world);
  std::vector<std::int64_t> sent(static_cast<std::size_t>(world), 0);
  for (int peer = 0; peer < world; ++peer) {
    const std::int64_t messages = transport.push(peer, 0, 0, gradient.data(), kFloats, pushes);
    INFO("peer " << peer << (transport.mapped(peer) ? " (mapped)" : " (network)"));
    CHECK(messages == (transport.mapped(peer) ? 19 : 5));
    sent[static_cast<std::size_t>(peer)] = messages;
  }
  transport.wait(pushes, "test push");
  std::vector<std::int64_t> owed(static_cast<std::size_t>(world), 0);
  MPI_Alltoall(sent.data(), 1, MPI_INT64_T, owed.data(), 1, MPI_INT64_T, MPI_COMM_WORLD);
  ledger.wait(owed, options.timeout_s, {}, "test receive");
  CHECK(arrived == owed);
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("a peer that never pushes is named after the timeout", "[mpi][ucx]") {
  const int world = mpi_world();
  if (world < 2) return;
  distributed::TransportOptions options;
  options.timeout_s = 0.5;
  auto group = test::world_group();
  distributed::PushLedger ledger(*group);
  distributed::UcxTransport transport(*group, 1024, options);
  transport.set_receiver([](const distributed::PushHeader&, const float*) {});
  if (mpi_rank() == 0) {
    std::vector<std::int64_t> expected(static_cast<std::size_t>(world), 0);
    expected[1] = 2;  // rank 1 owes two pushes it will never send
    CHECK_THROWS_WITH(ledger.wait(expected, options.timeout_s, {}, "the test's minibatch end"),
                      Catch::Contains("rank 1 (0 of 2)") && Catch::Contains("comm.timeout_s = 0.5"));
  }
  MPI_Barrier(MPI_COMM_WORLD);
}
