// The peer-memory context exchange between ranks that are threads (host shared memory works
// between threads as between processes): groups that change from exchange to exchange, members
// in any order, ranks outside a group left alone, odd row sizes, empty chunks, many rounds, a
// member that never comes, sizes over the region, and the plan held to what is allocated.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "odc/core/error.h"
#include "odc/distributed/group/in_process_group.h"
#include "odc/distributed/transport/context/context_exchange.h"
#include "unit/distributed/transport/context/context_exchange_checks.h"
#include "unit/rank_threads.h"

using namespace odc;
using distributed::ContextExchangeOptions;
using distributed::HostGroup;
using test::check_context_exchange;
using test::on_every_rank;
using test::split_of;

namespace {
ContextExchangeOptions options(double timeout_s, std::int64_t max_exposed) {
  ContextExchangeOptions o;
  o.timeout_s = timeout_s;
  o.max_exposed_bytes = max_exposed;
  return o;
}
}  // namespace

TEST_CASE("context exchange over peer memory: changing groups, every byte, 50 rounds", "[distributed][context]") {
  constexpr int kRounds = 50;
  std::vector<std::vector<std::string>> mismatches(4);
  std::vector<std::string> kinds(4);
  const auto errors = on_every_rank(4, [&](HostGroup& g) {
    auto exchange = distributed::make_context_exchange(g, nullptr, options(30.0, 64 << 10));
    kinds[static_cast<std::size_t>(g.rank())] = std::string(exchange->name());
    auto& seen = mismatches[static_cast<std::size_t>(g.rank())];
    const int r = g.rank();
    for (int round = 0; round < kRounds; ++round) {
      const auto base = static_cast<std::uint64_t>(round) * 16;
      const std::int64_t row_bytes = std::vector<std::int64_t>{3, 7, 13, 1}[static_cast<std::size_t>(round % 4)];
      // Pairs at once: {0, 2} and {1, 3}; sequences shorter than 2k (empty chunks) among them.
      const std::vector<std::int64_t> pair_lengths = {1, 3, 17 + round, 4};
      const std::vector<int> pair = r % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3};
      std::string e = check_context_exchange(*exchange, split_of(pair, r, pair_lengths, base + 1 + r % 2), row_bytes, base + 1);
      if (!e.empty()) seen.push_back(e);
      // Three members in an order unlike the ranks', while rank 2 exchanges alone (k = 1: only its
      // own rows) and never waits for the others.
      const std::vector<std::int64_t> trio_lengths = {5, 2, 31 + 2 * round, 6, 1};
      if (r == 2) {
        e = check_context_exchange(*exchange, split_of({2}, r, trio_lengths, base + 4), row_bytes + 2, base + 4);
      } else {
        e = check_context_exchange(*exchange, split_of({3, 0, 1}, r, trio_lengths, base + 3), row_bytes + 2, base + 3);
      }
      if (!e.empty()) seen.push_back(e);
      // Then all four in another order, only sequences shorter than 2k.
      e = check_context_exchange(*exchange, split_of({2, 1, 3, 0}, r, {1, 7, 3}, base + 5), row_bytes, base + 5);
      if (!e.empty()) seen.push_back(e);
    }
    // Ranks that are threads read each other's mappings: none goes while a peer may still look.
    g.barrier("the exchanges done");
  });
  for (int r = 0; r < 4; ++r) {
    const auto i = static_cast<std::size_t>(r);
    INFO("rank " << r);
    CHECK(errors[i].empty());
    CHECK(kinds[i] == "peer memory");
    CHECK(mismatches[i].empty());
    if (!mismatches[i].empty()) WARN(mismatches[i].front());
  }
}

TEST_CASE("context exchange over peer memory: a member that never comes is named", "[distributed][context]") {
  std::atomic<int> finished{0};
  const auto errors = on_every_rank(4, [&](HostGroup& g) {
    auto exchange = distributed::make_context_exchange(g, nullptr, options(0.5, 4096));
    // Rank 2 never comes (its memory stays mapped, as a frozen process's would); rank 3 is not in
    // the group.
    if (g.rank() == 2 || g.rank() == 3) {
      while (finished.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return;
    }
    try {
      (void)check_context_exchange(*exchange, split_of({0, 1, 2}, g.rank(), {40, 9}, 0x77), 5, 1);
    } catch (...) {
      ++finished;
      throw;
    }
    ++finished;
  });
  for (int r : {0, 1}) {
    const auto& e = errors[static_cast<std::size_t>(r)];
    INFO(e);
    CHECK(e.find("the keys' gather") != std::string::npos);
    CHECK(e.find("tag 0x77") != std::string::npos);
    CHECK(e.find("rank 2 (pid") != std::string::npos);
    CHECK(e.find("has not come") != std::string::npos);
  }
  CHECK(errors[2].empty());
  CHECK(errors[3].empty());
}

TEST_CASE("context exchange over peer memory: rows over the region name the sizes", "[distributed][context]") {
  const auto errors = on_every_rank(2, [&](HostGroup& g) {
    auto exchange = distributed::make_context_exchange(g, nullptr, options(5.0, 100));
    const auto split = split_of({0, 1}, g.rank(), {80}, 9);
    std::vector<char> mine(static_cast<std::size_t>(split.local_rows() * 3));
    std::vector<char> into(static_cast<std::size_t>(split.full_rows() * 3));
    const auto pieces = model::gather_pieces(split, 3);
    exchange->exchange(split, pieces, mine.data(), static_cast<std::int64_t>(mine.size()), into.data(),
                       static_cast<std::int64_t>(into.size()), "the values' gather");
  });
  for (const auto& e : errors) {
    INFO(e);
    CHECK(e.find("the values' gather") != std::string::npos);
    CHECK(e.find("exposes 120 bytes") != std::string::npos);
    CHECK(e.find("at most 100 bytes") != std::string::npos);
  }
}

TEST_CASE("context exchange: the plan is what the exchange allocates", "[distributed][context]") {
  for (std::int64_t exposed : {std::int64_t{0}, std::int64_t{12345}}) {
    std::vector<PlannedMemory> allocated(3);
    const auto errors = on_every_rank(3, [&](HostGroup& g) {
      auto exchange = distributed::make_context_exchange(g, nullptr, options(5.0, exposed));
      allocated[static_cast<std::size_t>(g.rank())] = exchange->allocated();
    });
    const auto planned = distributed::planned_context_exchange(options(5.0, exposed),
                                                               distributed::ContextExchangeKind::peer_memory, 3, false);
    for (std::size_t r = 0; r < 3; ++r) {
      CHECK(errors[r].empty());
      REQUIRE(allocated[r].items.size() == planned.items.size());
      for (std::size_t i = 0; i < planned.items.size(); ++i) {
        CHECK(allocated[r].items[i].name == planned.items[i].name);
        CHECK(allocated[r].items[i].bytes == planned.items[i].bytes);
      }
    }
    CHECK((planned.find("context exchange region") != nullptr) == (exposed > 0));
    CHECK(planned.find("context exchange signals")->bytes == 64 + 128 * 3);
  }
  // MPI with rows on a device stages them through host buffers; on the host it allocates nothing.
  const auto staged = distributed::planned_context_exchange(options(5.0, 1000), distributed::ContextExchangeKind::mpi, 8, true);
  CHECK(staged.items.size() == 3);
  CHECK(distributed::planned_context_exchange(options(5.0, 1000), distributed::ContextExchangeKind::mpi, 8, false).items.empty());
}

TEST_CASE("context exchange: the choice of implementation", "[distributed][context]") {
  ContextExchangeOptions o = options(5.0, 10);
  CHECK(distributed::choose_context_exchange(1, false, o) == distributed::ContextExchangeKind::peer_memory);
  CHECK(distributed::choose_context_exchange(1, true, o) == distributed::ContextExchangeKind::peer_memory);
  CHECK(distributed::choose_context_exchange(2, true, o) == distributed::ContextExchangeKind::mpi);
  CHECK_THROWS_WITH(distributed::choose_context_exchange(2, false, o), Catch::Contains("needs the ranks to meet over MPI"));
  o.force_mpi = true;
  CHECK(distributed::choose_context_exchange(1, true, o) == distributed::ContextExchangeKind::mpi);
  CHECK_THROWS_WITH(distributed::choose_context_exchange(1, false, o), Catch::Contains("do not meet over MPI"));
}
