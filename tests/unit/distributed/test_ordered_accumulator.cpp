// OrderedAccumulator (comm.deterministic): the owner's sum does not depend on the order pushes
// arrive in, and equals the fold of each client's pushes in push order, clients in rank order.
#include <algorithm>
#include <random>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "odc/core/error.h"
#include "odc/distributed/ordered_accumulator.h"
#include "odc/distributed/shard_store.h"

using namespace odc;

namespace {
model::LlamaConfig config() {
  return model::LlamaConfig::from_json({{"vocab_size", 13}, {"hidden_size", 8}, {"intermediate_size", 12},
                                        {"num_hidden_layers", 2}, {"num_attention_heads", 2}},
                                       "test", true);
}

struct Push {
  int client, unit;
  std::int32_t sequence;
  std::int64_t offset;
  std::vector<float> data;
};

// Pushes of `clients` clients, `per_client[c]` microbatches each (ranks run different numbers
// under LB-Mini), every unit's shard split into chunks of at most `chunk` floats. Values span
// magnitudes so that float addition order shows in the bits.
std::vector<Push> make_pushes(const distributed::ShardLayout& layout, const std::vector<int>& per_client,
                              std::int64_t chunk, std::mt19937& rng) {
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-12, 12);
  std::vector<Push> pushes;
  for (int c = 0; c < static_cast<int>(per_client.size()); ++c) {
    for (int m = 0; m < per_client[static_cast<std::size_t>(c)]; ++m) {
      for (int u = 0; u < layout.num_units(); ++u) {
        const std::int64_t shard = layout.unit(u).shard;
        for (std::int64_t off = 0; off < shard; off += chunk) {
          Push p{c, u, m, off, {}};
          for (std::int64_t i = off; i < std::min(shard, off + chunk); ++i) {
            p.data.push_back(std::ldexp(mantissa(rng), exponent(rng)));
          }
          pushes.push_back(std::move(p));
        }
      }
    }
  }
  return pushes;
}

std::vector<float> run(const distributed::ShardLayout& layout, const std::vector<Push>& pushes) {
  distributed::OrderedAccumulator acc(layout);
  acc.begin();
  for (const auto& p : pushes) {
    acc.add(p.client, p.unit, p.sequence, p.offset, p.data.data(), static_cast<std::int64_t>(p.data.size()));
  }
  REQUIRE(acc.held() == 0);
  std::vector<float> grads(static_cast<std::size_t>(layout.owned_elements()), -1.0f);
  acc.fold_into(grads.data());
  return grads;
}
}  // namespace

TEST_CASE("ordered accumulation gives the same bits for any arrival order", "[dist][deterministic]") {
  const auto units = model::build_unit_layouts(config());
  const distributed::ShardLayout layout(units, 3, 1);
  std::mt19937 rng(7);
  const auto pushes = make_pushes(layout, {3, 5, 1}, 5, rng);

  // The reference: each client's pushes in order, clients folded in rank order, in float.
  std::vector<std::vector<float>> per_client(3, std::vector<float>(static_cast<std::size_t>(layout.owned_elements()), 0.0f));
  for (const auto& p : pushes) {
    for (std::size_t i = 0; i < p.data.size(); ++i) {
      per_client[static_cast<std::size_t>(p.client)][static_cast<std::size_t>(layout.owned_offset(p.unit) + p.offset) + i] += p.data[i];
    }
  }
  std::vector<float> expected(per_client[0]);
  for (std::size_t c = 1; c < 3; ++c) {
    for (std::size_t i = 0; i < expected.size(); ++i) expected[i] += per_client[c][i];
  }
  CHECK(run(layout, pushes) == expected);

  // Arrival-order sums (plain ODC) differ in the bits for some order; the ordered one never does.
  bool arrival_order_differs = false;
  for (int trial = 0; trial < 20; ++trial) {
    auto shuffled = pushes;
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    CHECK(run(layout, shuffled) == expected);
    std::vector<float> arrival(expected.size(), 0.0f);
    for (const auto& p : shuffled) {
      for (std::size_t i = 0; i < p.data.size(); ++i) arrival[static_cast<std::size_t>(layout.owned_offset(p.unit) + p.offset) + i] += p.data[i];
    }
    arrival_order_differs = arrival_order_differs || arrival != expected;
  }
  CHECK(arrival_order_differs);  // the test data is sensitive to the order at all
}

TEST_CASE("an early push is held until its predecessors arrive", "[dist][deterministic]") {
  const auto units = model::build_unit_layouts(config());
  const distributed::ShardLayout layout(units, 2, 0);
  const std::int64_t shard = layout.unit(0).shard;
  distributed::OrderedAccumulator acc(layout);
  acc.begin();
  const std::vector<float> second(static_cast<std::size_t>(shard), 2.0f), first(static_cast<std::size_t>(shard), 1.0f);
  acc.add(1, 0, 1, 0, second.data(), shard);  // push 1 before push 0
  CHECK(acc.held() == 1);
  std::vector<float> grads(static_cast<std::size_t>(layout.owned_elements()));
  CHECK_THROWS_WITH(acc.fold_into(grads.data()), Catch::Contains("still held at the end of the minibatch"));
  acc.add(1, 0, 0, 0, first.data(), shard);
  CHECK(acc.held() == 0);
  acc.fold_into(grads.data());
  CHECK(grads[0] == 3.0f);
  CHECK(grads[static_cast<std::size_t>(shard - 1)] == 3.0f);
  CHECK(acc.bytes() == 2 * layout.owned_elements() * 4);
  // A push outside the shard is refused before anything is written.
  CHECK_THROWS_WITH(acc.add(0, 0, 0, shard - 1, first.data(), 2), Catch::Contains("invalid ordered gradient push"));
  acc.begin();
  acc.fold_into(grads.data());
  CHECK(std::all_of(grads.begin(), grads.end(), [](float g) { return g == 0.0f; }));
}
