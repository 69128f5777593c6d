// ShardLayout/ShardStore: padding, ownership and weight-decay segments.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "odc/distributed/shard/shard_store.h"

using namespace odc;

namespace {
model::LlamaConfig config() {
  return model::LlamaConfig::from_json({{"vocab_size", 11}, {"hidden_size", 8}, {"intermediate_size", 12},
                                        {"num_hidden_layers", 1}, {"num_attention_heads", 2}},
                                       "test", true);
}
}  // namespace

TEST_CASE("units are padded to the world size and split into equal contiguous shards", "[dist]") {
  const auto c = config();
  const auto units = model::build_unit_layouts(c);
  for (int world : {1, 2, 3, 4, 7}) {
    std::int64_t covered = 0;
    for (int r = 0; r < world; ++r) {
      distributed::ShardLayout layout(units, world, r);
      for (int u = 0; u < layout.num_units(); ++u) {
        const auto& s = layout.unit(u);
        CHECK(s.padded % world == 0);
        CHECK(s.padded - s.numel < world);
        CHECK(s.shard * world == s.padded);
        std::int64_t seg_total = 0;
        for (const auto& seg : layout.decay_segments(u)) seg_total += seg.count;
        CHECK(seg_total == s.shard);
      }
      covered += layout.owned_elements();
    }
    std::int64_t padded_total = 0;
    distributed::ShardLayout any(units, world, 0);
    for (int u = 0; u < any.num_units(); ++u) padded_total += any.unit(u).padded;
    CHECK(covered == padded_total);
  }
}

TEST_CASE("sharded initialization reassembles to the single-rank model", "[dist]") {
  const auto c = config();
  const auto units = model::build_unit_layouts(c);
  distributed::ShardStore whole(distributed::ShardLayout(units, 1, 0), units, c, 5);
  for (int world : {2, 3}) {
    for (int r = 0; r < world; ++r) {
      distributed::ShardStore part(distributed::ShardLayout(units, world, r), units, c, 5);
      for (int u = 0; u < static_cast<int>(units.size()); ++u) {
        const auto begin = part.layout().shard_begin(u, r);
        for (std::int64_t i = 0; i < part.shard_size(u); ++i) {
          const float expected = begin + i < units[static_cast<std::size_t>(u)].numel ? whole.master(u)[begin + i] : 0.0f;
          REQUIRE(part.master(u)[i] == expected);
        }
      }
    }
  }
}

TEST_CASE("weight decay covers matrices only", "[dist]") {
  const auto c = config();
  const auto units = model::build_unit_layouts(c);
  distributed::ShardLayout layout(units, 1, 0);
  // Layer unit: norm (8, no decay), q/k/v/o (decay), norm (no decay), mlp (decay).
  const auto& segs = layout.decay_segments(1);
  REQUIRE(segs.size() == 4);
  CHECK((!segs[0].weight_decay && segs[0].count == 8));
  CHECK(segs[1].weight_decay);
  CHECK((!segs[2].weight_decay && segs[2].count == 8));
  CHECK(segs[3].weight_decay);
}

TEST_CASE("a weights-only store holds the same masters and nothing else", "[dist]") {
  const auto c = config();
  const auto units = model::build_unit_layouts(c);
  const distributed::ShardLayout layout(units, 3, 1);
  distributed::ShardStore all(layout, units, c, 7);
  distributed::ShardStore weights(layout, units, c, 7, {}, nullptr, distributed::StoreContents::weights);
  CHECK(weights.contents() == distributed::StoreContents::weights);
  // The same deterministic initialization, element for element.
  const auto a = all.host_masters();
  const auto w = weights.host_masters();
  REQUIRE(a.size() == w.size());
  CHECK(std::equal(a.begin(), a.end(), w.begin()));
  // No gradients or moments: a quarter of the bytes, null accumulators, empty moments.
  CHECK(weights.bytes() * 4 == all.bytes());
  CHECK(weights.grad(0) == nullptr);
  CHECK(weights.grad(2) == nullptr);
  CHECK(weights.host_exp_avg().empty());
  CHECK(weights.host_exp_avg_sq().empty());
  weights.zero_grads();  // nothing to zero
  CHECK(weights.grad_sum_of_squares() == 0.0);
}
