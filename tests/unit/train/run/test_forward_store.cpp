// The tools' forward-only store (train::LoadedModel: a weights-only ShardStore that the checkpoint
// load fills): it holds the weights and nothing of training, draws no random weights first, and
// its forwards (whole sequences and over the KV cache) are bitwise those of the trainer's full
// store holding the same weights.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "odc/backend/backend_factory.h"
#include "odc/distributed/comm/local_comm.h"
#include "odc/distributed/shard/shard_store.h"
#include "odc/io/hf_checkpoint.h"
#include "odc/model/kv_cache.h"
#include "odc/model/llama_model.h"
#include "odc/model/units.h"
#include "odc/train/rollout/inference.h"
#include "unit/temp_dir.h"

using namespace odc;

namespace {

// The structure of the start-up benchmark's Qwen2.5-0.5B shape, small: q/k/v biases, tied
// embeddings, grouped-query attention.
model::LlamaConfig qwen2_like() {
  model::LlamaConfig c;
  c.vocab_size = 97;
  c.hidden_size = 32;
  c.intermediate_size = 80;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.max_position_embeddings = 64;
  c.tie_word_embeddings = true;
  c.attention_bias = true;
  return c;
}

constexpr std::uint64_t kSeed = 23;

std::string write_model(const test::TempDir& dir) {
  const auto config = qwen2_like();
  const auto units = model::build_unit_layouts(config);
  const std::string path = dir.file("model");
  io::write_hf_checkpoint(path, config, "Qwen2ForCausalLM", DType::f32, [&](int unit, float* out) {
    const auto& layout = units[static_cast<std::size_t>(unit)];
    model::init_unit_range(layout, config, kSeed, 0, layout.numel, out);
  });
  return path;
}

model::PackedBatch two_sequences() {
  const std::vector<std::int32_t> a = {3, 90, 17, 4, 4, 61, 2, 33, 8}, b = {50, 1, 96, 12, 70};
  const std::vector<std::uint8_t> mask_a(a.size(), 1), mask_b = {0, 0, 1, 1, 1};
  model::PackedBatch batch;
  batch.append(a.data(), mask_a.data(), static_cast<std::int64_t>(a.size()), 1.0f);
  batch.append(b.data(), mask_b.data(), static_cast<std::int64_t>(b.size()), 1.0f);
  return batch;
}

}  // namespace

TEST_CASE("forward-only store: the weights alone, filled by the load, nothing drawn", "[train][inference]") {
  const test::TempDir dir("forward_store");
  const std::string path = write_model(dir);
  const train::LoadedModel loaded(path, 1);
  const distributed::ShardStore& store = loaded.store();
  CHECK(store.contents() == distributed::StoreContents::weights);
  CHECK_FALSE(store.masters_drawn());
  // The masters' bytes and nothing else: no gradient accumulator, no AdamW moments (4 x for a full store).
  CHECK(store.bytes() == store.layout().owned_elements() * static_cast<std::int64_t>(sizeof(float)));
  // Every master is the checkpoint's.
  const auto config = qwen2_like();
  const auto units = model::build_unit_layouts(config);
  for (int u = 0; u < store.layout().num_units(); ++u) {
    const auto& unit = units[static_cast<std::size_t>(u)];
    std::vector<float> expected(static_cast<std::size_t>(unit.numel));
    model::init_unit_range(unit, config, kSeed, 0, unit.numel, expected.data());
    INFO("unit " << u);
    CHECK(std::vector<float>(store.master(u), store.master(u) + unit.numel) == expected);
  }
}

TEST_CASE("forward-only store: forwards are bitwise the full store's with the same weights", "[train][inference]") {
  const test::TempDir dir("forward_store_bits");
  const std::string path = write_model(dir);
  train::LoadedModel loaded(path, 1);
  // The trainer's kind of store: all four kinds, random weights drawn, then the checkpoint's read over them.
  const io::HfCheckpoint checkpoint(path);
  model::LlamaModel full_model(checkpoint.config(), backend::make_backend("cpu", DType::f32, 1));
  const distributed::ShardLayout layout(full_model.units(), 1, 0);
  distributed::ShardStore full(layout, full_model.units(), checkpoint.config(), 3);
  REQUIRE(full.bytes() == 4 * loaded.store().bytes());
  for (int u = 0; u < layout.num_units(); ++u) checkpoint.read_unit_range(u, 0, layout.unit(u).shard, full.master(u));
  distributed::LocalComm comm(full);

  const model::PackedBatch batch = two_sequences();
  std::vector<float> ours, theirs;
  const auto a = loaded.forward(batch, &ours);
  const auto b = full_model.forward(batch, comm, &theirs);
  CHECK(a.nll_sum == b.nll_sum);  // the same kernels on the same bits: equal, not close
  CHECK(a.target_tokens == b.target_tokens);
  REQUIRE(ours.size() == static_cast<std::size_t>(batch.num_tokens() * qwen2_like().vocab_size));
  CHECK(ours == theirs);

  // Over the KV cache: a prompt, then one token at a time.
  const std::vector<std::int32_t> prompt = {5, 40, 7, 88}, next = {19, 64};
  model::KvCache our_cache = loaded.make_cache(8);
  model::KvCache their_cache(full_model.backend(), full_model.config(), 8);
  loaded.forward_cached(prompt, our_cache, ours);
  full_model.forward_cached(prompt, their_cache, comm, theirs);
  CHECK(ours == theirs);
  for (const std::int32_t token : next) {
    loaded.forward_cached(std::span<const std::int32_t>(&token, 1), our_cache, ours);
    full_model.forward_cached(std::span<const std::int32_t>(&token, 1), their_cache, comm, theirs);
    CHECK(ours == theirs);
  }
}

TEST_CASE("forward-only store: a gradient is refused, naming why", "[train][inference]") {
  const auto config = qwen2_like();
  const auto units = model::build_unit_layouts(config);
  const distributed::ShardLayout layout(units, 1, 0);
  distributed::ShardStore weights(layout, units, config, std::nullopt, {}, nullptr,
                                  distributed::StoreContents::weights);
  distributed::LocalComm comm(weights);
  CHECK(comm.acquire(1) == weights.master(1));
  CHECK_THROWS_WITH(comm.grad_buffer(1), Catch::Contains("weights-only store, which serves forwards only"));
}
