// PushAccumulator, deterministic (comm.deterministic): the owner's sum does not depend on the
// order pushes arrive in, and equals the fold of each client's pushes in push order, clients in
// rank order. Plain: chunks add into the accumulator as they come. Both ODC transports use it.
#include <algorithm>
#include <random>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "odc/core/error.h"
#include "odc/distributed/comm/push_accumulator.h"
#include "odc/distributed/shard/shard_store.h"

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
  std::vector<float> grads(static_cast<std::size_t>(layout.owned_elements()), 0.0f);
  distributed::PushAccumulator acc(layout, grads.data(), true, distributed::host_accumulator_memory());
  acc.begin();
  for (const auto& p : pushes) {
    acc.add(p.client, p.unit, p.sequence, p.offset, p.data.data(), static_cast<std::int64_t>(p.data.size()));
  }
  REQUIRE(acc.held() == 0);
  acc.finish();
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
  std::vector<float> grads(static_cast<std::size_t>(layout.owned_elements()), 0.0f);
  distributed::PushAccumulator acc(layout, grads.data(), true, distributed::host_accumulator_memory());
  acc.begin();
  const std::vector<float> second(static_cast<std::size_t>(shard), 2.0f), first(static_cast<std::size_t>(shard), 1.0f);
  acc.add(1, 0, 1, 0, second.data(), shard);  // push 1 before push 0
  CHECK(acc.held() == 1);
  CHECK_THROWS_WITH(acc.finish(), Catch::Contains("still held at the end of the minibatch"));
  acc.add(1, 0, 0, 0, first.data(), shard);
  CHECK(acc.held() == 0);
  acc.finish();
  CHECK(grads[0] == 3.0f);
  CHECK(grads[static_cast<std::size_t>(shard - 1)] == 3.0f);
  CHECK(acc.bytes() == 2 * layout.owned_elements() * 4);
  // A push outside the shard is refused before anything is written.
  CHECK_THROWS_WITH(acc.add(0, 0, 0, shard - 1, first.data(), 2), Catch::Contains("rank 0: invalid gradient push from rank 0 (unit 0, push 0"));
  acc.begin();
  std::fill(grads.begin(), grads.end(), 0.0f);  // the store zeroes its accumulator at each minibatch start
  acc.finish();
  CHECK(std::all_of(grads.begin(), grads.end(), [](float g) { return g == 0.0f; }));
}

TEST_CASE("plain accumulation adds each chunk into the accumulator as it comes, nothing is held", "[dist]") {
  const auto units = model::build_unit_layouts(config());
  const distributed::ShardLayout layout(units, 3, 2);
  std::vector<float> grads(static_cast<std::size_t>(layout.owned_elements()), 0.0f);
  distributed::PushAccumulator acc(layout, grads.data(), false, distributed::host_accumulator_memory());
  CHECK(acc.bytes() == 0);
  acc.begin();
  const int unit = layout.num_units() - 1;
  const std::int64_t shard = layout.unit(unit).shard;
  const std::vector<float> ones(static_cast<std::size_t>(shard), 1.0f);
  // A later push of a client before an earlier one: no order is kept, both are added at once.
  acc.add(1, unit, 1, 0, ones.data(), shard);
  acc.add(0, unit, 0, 1, ones.data(), shard - 1);
  CHECK(acc.held() == 0);
  const float* g = grads.data() + layout.owned_offset(unit);
  CHECK(g[0] == 1.0f);
  CHECK(g[1] == 2.0f);
  CHECK(g[shard - 1] == 2.0f);
  acc.finish();  // nothing to fold
  CHECK(g[1] == 2.0f);
  CHECK_THROWS_WITH(acc.add(3, unit, 0, 0, ones.data(), 1), Catch::Contains("invalid gradient push from rank 3"));
}
