// The context exchange under mpirun, ranks as processes: both implementations (peer memory on
// this one host, and MPI point to point, forced), groups that change from exchange to exchange
// and list their members in any order, ranks outside a group doing other work meanwhile (no
// host-group call), odd row sizes, empty chunks, every byte checked (the checks are the unit
// tests': unit/distributed/transport/context/context_exchange_checks.h), and a member that never
// comes named by the others.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "mpi_test_support.h"
#include "odc/core/error.h"
#include "odc/backend/cpu_backend.h"
#include "odc/distributed/transport/context/context_exchange.h"
#include "odc/distributed/transport/context/mpi_context_exchange.h"
#include "unit/distributed/transport/context/context_exchange_checks.h"

using namespace odc;
using distributed::ContextExchangeKind;
using distributed::ContextExchangeOptions;
using test::check_context_exchange;
using test::split_of;

namespace {

ContextExchangeOptions options(bool mpi, double timeout_s) {
  ContextExchangeOptions o;
  o.timeout_s = timeout_s;
  o.max_exposed_bytes = 64 << 10;
  o.force_mpi = mpi;
  return o;
}

// Work of a rank outside the group, touching no group: a little arithmetic and a sleep, so the
// members run at other times than it does.
double other_work(int rank, int round) {
  double sum = 0;
  for (int i = 0; i < 20000 * (1 + (rank + round) % 3); ++i) sum += std::sqrt(static_cast<double>(i));
  std::this_thread::sleep_for(std::chrono::milliseconds((rank * 7 + round) % 4));
  return sum;
}

std::vector<int> all_ranks(int world) {
  std::vector<int> all;
  for (int q = 0; q < world; ++q) all.push_back(q);
  return all;
}

}  // namespace

TEST_CASE("context exchange under mpirun: both implementations, changing groups, every byte", "[mpi][context]") {
  auto group = test::world_group();
  const int r = group->rank();
  const int world = group->size();
  for (const bool mpi : {false, true}) {
    auto exchange = distributed::make_context_exchange(*group, nullptr, options(mpi, 60.0));
    CHECK(exchange->kind() == (mpi ? ContextExchangeKind::mpi : ContextExchangeKind::peer_memory));
    std::vector<std::string> mismatches;
    double work = 0;
    for (int round = 0; round < 20; ++round) {
      const auto base = static_cast<std::uint64_t>(round) * 16 + (mpi ? 1000 : 0);
      const std::int64_t row_bytes = std::vector<std::int64_t>{3, 7, 13, 1}[static_cast<std::size_t>(round % 4)];
      // Neighbouring pairs at once ({0, 1}, {2, 3}, ...), listed backwards on odd rounds; a last
      // rank without a partner exchanges alone.
      std::vector<int> pair = {r - r % 2};
      if (pair[0] + 1 < world) pair.push_back(pair[0] + 1);
      if (round % 2 == 1) std::reverse(pair.begin(), pair.end());
      std::string e = check_context_exchange(*exchange, split_of(pair, r, {1, 3, 17 + round, 4}, base + 1 + r / 2),
                                             row_bytes, base + 1);
      if (!e.empty()) mismatches.push_back(e);
      // The last rank, 0 and 1 (in that order), while the others work on their own.
      std::vector<int> trio;
      for (const int q : {world - 1, 0, 1}) {
        if (q < world && std::find(trio.begin(), trio.end(), q) == trio.end()) trio.push_back(q);
      }
      if (std::find(trio.begin(), trio.end(), r) != trio.end()) {
        e = check_context_exchange(*exchange, split_of(trio, r, {5, 2, 31 + 2 * round, 6, 1}, base + 3), row_bytes + 2,
                                   base + 3);
        if (!e.empty()) mismatches.push_back(e);
      } else {
        work += other_work(r, round);
      }
      // Everyone, backwards, sequences shorter than 2k only.
      std::vector<int> all(static_cast<std::size_t>(world));
      for (int q = 0; q < world; ++q) all[static_cast<std::size_t>(q)] = world - 1 - q;
      e = check_context_exchange(*exchange, split_of(all, r, {1, 7, 3}, base + 5), row_bytes, base + 5);
      if (!e.empty()) mismatches.push_back(e);
    }
    INFO("rank " << r << (mpi ? ", MPI" : ", peer memory") << ": " << (mismatches.empty() ? "" : mismatches.front()));
    CHECK(mismatches.empty());
    CHECK(work >= 0);
    group->barrier("the context exchanges checked");
  }
}

TEST_CASE("context exchange under mpirun: a member that never comes is named", "[mpi][context]") {
  auto group = test::world_group();
  if (group->size() < 2) return;
  const int r = group->rank();
  for (const bool mpi : {false, true}) {
    auto exchange = distributed::make_context_exchange(*group, nullptr, options(mpi, 0.5));
    std::string error;
    // Rank 1 never comes to the group {0, 1}; the other ranks are not in it.
    if (r == 0) {
      try {
        (void)check_context_exchange(*exchange, split_of({0, 1}, r, {40, 9}, 0x77), 5, 1);
      } catch (const Error& e) {
        error = e.what();
      }
    }
    group->barrier("the absent member's test");
    if (r == 0) {
      INFO(error);
      CHECK(error.find("the keys' gather") != std::string::npos);
      CHECK(error.find("tag 0x77") != std::string::npos);
      CHECK(error.find("rank 1 ") != std::string::npos);
    }
  }
}

TEST_CASE("context exchange under mpirun: rows staged through a backend's copies", "[mpi][context]") {
  // A CPU backend takes the staged path (download whole, receive packed member by member, upload,
  // copy to their places) that rows on a GPU take across hosts.
  auto group = test::world_group();
  const int r = group->rank();
  const int world = group->size();
  backend::CpuBackend cpu;
  distributed::MpiContextExchange exchange(*group, &cpu, options(true, 60.0));
  std::vector<std::string> mismatches;
  for (int round = 0; round < 10; ++round) {
    std::vector<int> all(static_cast<std::size_t>(world));
    for (int q = 0; q < world; ++q) all[static_cast<std::size_t>(q)] = (q + round) % world;
    const std::string e = check_context_exchange(exchange, split_of(all, r, {1, 9 + round, 2, 40}, 7 + round),
                                                 4 * (1 + round % 3), 50 + round);
    if (!e.empty()) mismatches.push_back(e);
  }
  INFO("rank " << r << ": " << (mismatches.empty() ? "" : mismatches.front()));
  CHECK(mismatches.empty());
  // Rows on a device travel in whole words.
  if (world > 1) {
    CHECK_THROWS_WITH(check_context_exchange(exchange, split_of(all_ranks(world), r, {8}, 99), 3, 1),
                      Catch::Contains("whole 4-byte words"));
  }
  // What it allocates is what the plan says.
  const auto planned = distributed::planned_context_exchange(options(true, 60.0), ContextExchangeKind::mpi, world, true);
  const auto allocated = exchange.allocated();
  REQUIRE(allocated.items.size() == planned.items.size());
  for (std::size_t i = 0; i < planned.items.size(); ++i) {
    CHECK(allocated.items[i].name == planned.items[i].name);
    CHECK(allocated.items[i].bytes == planned.items[i].bytes);
  }
  group->barrier("the staged context exchanges checked");
}
