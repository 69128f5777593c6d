// Packing respects the cap, keeps order and places every sequence once; the sampler visits every
// index once per epoch, reproducibly, with a different order each epoch.
#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>
#include <set>
#include <vector>

#include "odc/core/error.h"
#include "odc/data/packing.h"

using odc::data::pack_in_order;
using odc::data::Sampler;

TEST_CASE("pack_in_order: greedy, in order, under the cap", "[data]") {
  SECTION("a worked example") {
    // 5+3 fits 10; 4 would make 12 -> new microbatch; 4+6 = 10 fits exactly; 1 -> new.
    const std::vector<std::int64_t> lengths = {5, 3, 4, 6, 1, 10};
    const auto packed = pack_in_order(lengths, 10);
    const std::vector<std::vector<std::int64_t>> expected = {{0, 1}, {2, 3}, {4}, {5}};
    REQUIRE(packed == expected);
  }
  SECTION("random lengths: every index once, in order, each microbatch within the cap") {
    std::vector<std::int64_t> lengths;
    std::uint64_t x = 12345;
    for (int i = 0; i < 1000; ++i) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      lengths.push_back(1 + static_cast<std::int64_t>((x >> 33) % 512));
    }
    const std::int64_t cap = 1024;
    const auto packed = pack_in_order(lengths, cap);
    std::vector<std::int64_t> flat;
    for (std::size_t m = 0; m < packed.size(); ++m) {
      REQUIRE_FALSE(packed[m].empty());
      std::int64_t tokens = 0;
      for (auto i : packed[m]) tokens += lengths[static_cast<std::size_t>(i)];
      REQUIRE(tokens <= cap);
      // Greedy: the next microbatch's first sequence did not fit into this one.
      if (m + 1 < packed.size()) {
        REQUIRE(tokens + lengths[static_cast<std::size_t>(packed[m + 1].front())] > cap);
      }
      flat.insert(flat.end(), packed[m].begin(), packed[m].end());
    }
    std::vector<std::int64_t> identity(lengths.size());
    std::iota(identity.begin(), identity.end(), 0);
    REQUIRE(flat == identity);
    const std::int64_t total = std::accumulate(lengths.begin(), lengths.end(), std::int64_t{0});
    REQUIRE(static_cast<std::int64_t>(packed.size()) >= (total + cap - 1) / cap);
  }
  SECTION("empty input gives no microbatches") {
    REQUIRE(pack_in_order({}, 16).empty());
  }
}

TEST_CASE("pack_in_order rejects too-long sequences and bad caps", "[data]") {
  REQUIRE_THROWS_AS(pack_in_order({4, 17, 2}, 16), odc::Error);
  REQUIRE_THROWS_WITH(pack_in_order({4, 17, 2}, 16),
                      Catch::Contains("sequence of length 17 exceeds "
                                      "data.max_tokens_per_microbatch = 16"));
  REQUIRE_NOTHROW(pack_in_order({16}, 16));
  REQUIRE_THROWS_WITH(pack_in_order({4}, 0), Catch::Contains("max_tokens_per_microbatch"));
  REQUIRE_THROWS_WITH(pack_in_order({4}, -3), Catch::Contains("-3"));
  REQUIRE_THROWS_WITH(pack_in_order({4, 0}, 16), Catch::Contains("length 0"));
}

TEST_CASE("Sampler covers every index once per epoch and reshuffles each epoch", "[data]") {
  const std::int64_t n = 97;
  Sampler sampler(n, 2024, true);
  std::vector<std::vector<std::int64_t>> epochs;
  for (int e = 0; e < 3; ++e) {
    REQUIRE(sampler.epoch() == e);
    REQUIRE(sampler.position() == 0);
    std::vector<std::int64_t> order;
    // Uneven chunks that do not divide n, to cross positions mid-epoch.
    for (std::int64_t taken = 0; taken < n;) {
      const std::int64_t chunk = std::min<std::int64_t>(10, n - taken);
      const auto got = sampler.next(chunk);
      REQUIRE(static_cast<std::int64_t>(got.size()) == chunk);
      order.insert(order.end(), got.begin(), got.end());
      taken += chunk;
    }
    std::vector<std::int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    std::vector<std::int64_t> identity(static_cast<std::size_t>(n));
    std::iota(identity.begin(), identity.end(), 0);
    REQUIRE(sorted == identity);
    REQUIRE(order != identity);  // actually shuffled
    epochs.push_back(order);
  }
  REQUIRE(epochs[0] != epochs[1]);
  REQUIRE(epochs[1] != epochs[2]);
  REQUIRE(epochs[0] != epochs[2]);

  // Same seed -> same sequence of indices, including across the epoch boundary.
  Sampler replay(n, 2024, true);
  const auto first = replay.next(n + 5);
  REQUIRE(std::vector<std::int64_t>(first.begin(), first.begin() + n) == epochs[0]);
  REQUIRE(std::vector<std::int64_t>(first.begin() + n, first.end()) ==
          std::vector<std::int64_t>(epochs[1].begin(), epochs[1].begin() + 5));
  REQUIRE(replay.epoch() == 1);
  REQUIRE(replay.position() == 5);

  // A different seed gives a different order.
  Sampler other(n, 2025, true);
  REQUIRE(other.next(n) != epochs[0]);
}

TEST_CASE("Sampler without shuffle is the identity, crossing epochs", "[data]") {
  Sampler sampler(5, 1, false);
  REQUIRE(sampler.next(3) == std::vector<std::int64_t>{0, 1, 2});
  REQUIRE(sampler.next(4) == std::vector<std::int64_t>{3, 4, 0, 1});
  REQUIRE(sampler.epoch() == 1);
  REQUIRE(sampler.position() == 2);
  // A request larger than the dataset spans several epochs.
  REQUIRE(sampler.next(12) == std::vector<std::int64_t>{2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3});
  REQUIRE(sampler.epoch() == 3);
}

TEST_CASE("Sampler rejects bad sizes", "[data]") {
  Sampler sampler(4, 0, true);
  REQUIRE_THROWS_AS(sampler.next(0), odc::Error);
  REQUIRE_THROWS_WITH(sampler.next(-1), Catch::Contains("-1"));
  REQUIRE_THROWS_AS(Sampler(0, 0, true), odc::Error);
  Sampler single(1, 9, true);
  REQUIRE(single.next(3) == std::vector<std::int64_t>{0, 0, 0});
}
