// Activation recomputation (train.recompute): every mode gives the gradients and losses of `none`
// bit for bit (the recomputed forward runs the same kernels on the same inputs), on the CPU in
// float32 and in the bf16 mode, for the model variants that keep different activations; the
// activation memory is what model::activation_bytes predicts, and shrinks none > selective > full.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "odc/backend/cpu_backend.h"
#include "odc/core/error.h"
#include "odc/distributed/comm/local_comm.h"
#include "odc/distributed/shard/shard_store.h"
#include "odc/model/llama_model.h"
#include "odc/model/recompute.h"

#include "call_log.h"
#include "unit/synthetic_data.h"

using namespace odc;

namespace {

// plain; tied embeddings with q/k/v biases; Qwen3's q/k norms (head_dim 10 where hidden is 24).
model::LlamaConfig config_of(int variant) {
  nlohmann::json j = {{"vocab_size", 37},       {"hidden_size", 24},        {"intermediate_size", 40},
                      {"num_hidden_layers", 3}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                      {"rms_norm_eps", 1e-5},   {"tie_word_embeddings", variant == 1}, {"attention_bias", variant == 1}};
  if (variant == 2) {
    j["model_type"] = "qwen3";
    j["head_dim"] = 10;
  }
  return model::LlamaConfig::from_json(j, "test", true);
}

// Two microbatches of different lengths (the working set is reused across them), prompts masked.
std::vector<model::PackedBatch> batches(std::int64_t vocab) {
  std::vector<model::PackedBatch> out(2);
  test::Lcg rng(777);
  const std::vector<std::vector<int>> lengths = {{13, 4, 9}, {21}};
  for (std::size_t b = 0; b < out.size(); ++b) {
    for (int len : lengths[b]) {
      const auto s = test::synthetic_sequence(rng, len, static_cast<std::uint32_t>(vocab), 8, 4);
      out[b].append(s.tokens.data(), s.mask.data(), len, 1.0f);
    }
  }
  return out;
}

struct Outcome {
  std::vector<double> losses;
  std::vector<std::vector<float>> grads;
  std::int64_t activation_bytes = 0;
};

Outcome train(const model::LlamaConfig& config, DType dtype, model::Recompute mode) {
  model::LlamaModel m(config, std::make_unique<backend::CpuBackend>(1, dtype));
  m.set_recompute(mode);
  distributed::ShardLayout layout(m.units(), 1, 0);
  distributed::ShardStore store(layout, m.units(), config, 11);
  distributed::LocalComm comm(store);
  comm.begin_minibatch();
  Outcome out;
  for (const auto& b : batches(config.vocab_size)) out.losses.push_back(m.train_microbatch(b, comm, comm).weighted_loss);
  for (int u = 0; u < m.num_units(); ++u) out.grads.emplace_back(store.grad(u), store.grad(u) + store.shard_size(u));
  out.activation_bytes = m.activation_bytes();
  return out;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("recomputation gives the gradients and losses of none bit for bit (fp32 and bf16)", "[model][recompute]") {
  for (int variant = 0; variant < 3; ++variant) {
    const auto config = config_of(variant);
    for (const DType dtype : {DType::f32, DType::bf16}) {
      const Outcome none = train(config, dtype, model::Recompute::none);
      for (const auto mode : {model::Recompute::selective, model::Recompute::full}) {
        INFO("variant " << variant << ", " << dtype_name(dtype) << ", recompute " << model::recompute_name(mode));
        const Outcome again = train(config, dtype, mode);
        REQUIRE(again.losses.size() == none.losses.size());
        for (std::size_t i = 0; i < none.losses.size(); ++i) CHECK(std::memcmp(&again.losses[i], &none.losses[i], 8) == 0);
        REQUIRE(again.grads.size() == none.grads.size());
        for (std::size_t u = 0; u < none.grads.size(); ++u) {
          INFO("unit " << u);
          CHECK(bitwise_equal(again.grads[u], none.grads[u]));
        }
        CHECK(again.activation_bytes < none.activation_bytes);
      }
    }
  }
}

TEST_CASE("activation_bytes predicts the model's activation memory exactly per mode", "[model][recompute]") {
  for (int variant = 0; variant < 3; ++variant) {
    const auto config = config_of(variant);
    for (const DType dtype : {DType::f32, DType::bf16}) {
      std::int64_t previous = -1;
      for (const auto mode : {model::Recompute::none, model::Recompute::selective, model::Recompute::full}) {
        INFO("variant " << variant << ", " << dtype_name(dtype) << ", recompute " << model::recompute_name(mode));
        const Outcome o = train(config, dtype, mode);
        // The longest microbatch sets every buffer's capacity: 26 and 21 tokens, 3 and 1 sequences.
        const backend::CpuBackend b(1, dtype);
        // (The CPU backend stores activations in fp32 in its bf16 mode too: its activation dtype.)
        const auto predicted = model::activation_bytes(config, b.activation_dtype(), 26, mode,
                                                       b.head_chunk_rows(config.vocab_size), 3, false);
        CHECK(predicted.total() == o.activation_bytes);
        if (previous >= 0) CHECK(o.activation_bytes < previous);
        previous = o.activation_bytes;
      }
    }
  }
}

TEST_CASE("the kept activations per token per layer at a LLaMA-3-8B shape", "[model][recompute]") {
  const auto config = model::LlamaConfig::from_json(
      {{"vocab_size", 128256}, {"hidden_size", 4096}, {"intermediate_size", 14336}, {"num_hidden_layers", 32},
       {"num_attention_heads", 32}, {"num_key_value_heads", 8}},
      "8b", true);
  const std::int64_t t = 1024;
  auto per_token_layer = [&](model::Recompute mode) {
    const auto a = model::activation_bytes(config, DType::bf16, t, mode, 512);
    return static_cast<double>(a.kept) / static_cast<double>(t * config.num_hidden_layers);
  };
  // none: 3c + 2q + 2kv + 2f bf16 values and 34 fp32 statistics = 102,536 bytes; selective: the
  // attention output (q values) and 32 log-sum-exps = 8,320; full: nothing beyond the layer input.
  CHECK(per_token_layer(model::Recompute::none) == 2.0 * (3 * 4096 + 2 * 4096 + 2 * 1024 + 2 * 14336) + 4.0 * 34);
  CHECK(per_token_layer(model::Recompute::selective) == 2.0 * 4096 + 4.0 * 32);
  CHECK(per_token_layer(model::Recompute::full) == 0.0);
}

TEST_CASE("train.recompute names its values", "[model][recompute]") {
  CHECK(model::parse_recompute("full") == model::Recompute::full);
  CHECK(model::recompute_name(model::parse_recompute("selective")) == "selective");
  CHECK_THROWS_WITH(model::parse_recompute("partial"), Catch::Contains("train.recompute") &&
                                                           Catch::Contains("none, selective or full"));
}


TEST_CASE("recomputation gathers nothing more: the same acquire, prefetch and push calls as none", "[model][recompute]") {
  for (int variant = 0; variant < 3; ++variant) {
    const auto config = config_of(variant);
    std::vector<std::string> reference;
    for (const auto mode : {model::Recompute::none, model::Recompute::selective, model::Recompute::full}) {
      INFO("variant " << variant << ", recompute " << model::recompute_name(mode));
      model::LlamaModel m(config, std::make_unique<backend::CpuBackend>());
      m.set_recompute(mode);
      distributed::ShardLayout layout(m.units(), 1, 0);
      distributed::ShardStore store(layout, m.units(), config, 11);
      test::CallLog calls(store, /*prefetches=*/true);
      for (const auto& b : batches(config.vocab_size)) m.train_microbatch(b, calls, calls);
      if (mode == model::Recompute::none) {
        reference = calls.log;
        // Each layer unit is acquired twice per microbatch (forward, backward), as without any
        // recomputation.
        CHECK(std::count(reference.begin(), reference.end(), "A1") == 4);
      } else {
        CHECK(calls.log == reference);
      }
    }
  }
}
