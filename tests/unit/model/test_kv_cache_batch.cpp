// LlamaModel::forward_cached_batch (batched sampling): several sequences of different lengths,
// each with its own KV cache, decode one token each per call; every sequence's logits agree with
// its own full forward at every step (so each row got its own RoPE position, its keys and values
// went into its own cache, and its attention read only that cache), for GQA and Qwen3's q/k norms;
// misuse is a clear error.
//
// Tolerance as test_kv_cache.cpp's: the same fp32 ops over other GEMM shapes (all sequences' rows
// together), differing by summation order only, far below 1e-5 of the logits' scale.
#include <algorithm>
#include <cmath>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "odc/backend/cpu_backend.h"
#include "odc/core/error.h"
#include "odc/model/kv_cache.h"
#include "odc/model/llama_model.h"
#include "odc/model/resident_weights.h"

using namespace odc;

namespace {

model::LlamaConfig shape(bool qwen3) {
  nlohmann::json j = {{"vocab_size", 61},       {"hidden_size", 32},          {"intermediate_size", 48},
                      {"num_hidden_layers", 2}, {"num_attention_heads", 4},   {"num_key_value_heads", 2},
                      {"head_dim", 8},          {"rms_norm_eps", 1e-5},       {"max_position_embeddings", 64},
                      {"initializer_range", 0.3}};
  if (qwen3) {
    j["model_type"] = "qwen3";
    j["head_dim"] = 12;
  }
  return model::LlamaConfig::from_json(j, "test", true);
}

std::vector<float> full_logits(model::LlamaModel& m, model::ParamSource& w, const std::vector<std::int32_t>& seq) {
  model::PackedBatch batch;
  batch.append(seq.data(), nullptr, static_cast<std::int64_t>(seq.size()), 0.0f);
  std::vector<float> logits;
  m.forward(batch, w, &logits);
  return logits;
}

}  // namespace

TEST_CASE("forward_cached_batch: each sequence decodes as it would alone", "[model][kv_cache]") {
  const bool qwen3 = GENERATE(false, true);
  CAPTURE(qwen3);
  const auto config = shape(qwen3);
  model::LlamaModel m(config, std::make_unique<backend::CpuBackend>());
  model::ResidentWeights weights(m.units(), config, 3);
  const std::vector<std::int64_t> prompts{5, 1, 12, 7};  // ragged: every sequence at its own position
  const int steps = 9;
  std::vector<std::vector<std::int32_t>> seqs;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    std::vector<std::int32_t> s;
    for (std::int64_t t = 0; t < prompts[i] + steps; ++t) {
      s.push_back(static_cast<std::int32_t>((7 * t + 13 * static_cast<std::int64_t>(i) + t * t) % config.vocab_size));
    }
    seqs.push_back(s);
  }
  std::vector<model::KvCache> caches;
  std::vector<model::KvCache*> pointers;
  std::vector<float> logits;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    caches.emplace_back(m.backend(), config, 32);
  }
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    pointers.push_back(&caches[i]);
    m.forward_cached(std::span<const std::int32_t>(seqs[i]).first(static_cast<std::size_t>(prompts[i])), caches[i],
                     weights, logits);
  }
  std::vector<std::vector<float>> full;
  for (const auto& s : seqs) full.push_back(full_logits(m, weights, s));
  const auto vocab = static_cast<std::size_t>(config.vocab_size);
  double worst = 0.0;
  for (int step = 0; step < steps; ++step) {
    std::vector<std::int32_t> next;
    for (std::size_t i = 0; i < prompts.size(); ++i) next.push_back(seqs[i][static_cast<std::size_t>(prompts[i] + step)]);
    m.forward_cached_batch(next, pointers, weights, logits);
    REQUIRE(logits.size() == prompts.size() * vocab);
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      CHECK(caches[i].length() == prompts[i] + step + 1);
      const std::size_t row = static_cast<std::size_t>(prompts[i] + step);  // the position just run
      double diff = 0.0, scale = 0.0;
      for (std::size_t v = 0; v < vocab; ++v) {
        const double want = full[i][row * vocab + v];
        diff = std::max(diff, std::abs(static_cast<double>(logits[i * vocab + v]) - want));
        scale = std::max(scale, std::abs(want));
      }
      worst = std::max(worst, diff / scale);
    }
  }
  CAPTURE(worst);
  CHECK(worst < 1e-5);
}

TEST_CASE("forward_cached_batch: mismatched tokens, a shared cache and a full cache are errors", "[model][kv_cache]") {
  const auto config = shape(false);
  model::LlamaModel m(config, std::make_unique<backend::CpuBackend>());
  model::ResidentWeights weights(m.units(), config, 3);
  model::KvCache a(m.backend(), config, 2), b(m.backend(), config, 2);
  std::vector<float> logits;
  std::vector<model::KvCache*> two{&a, &b}, shared{&a, &a};
  const std::vector<std::int32_t> one_token{1}, two_tokens{1, 2};
  CHECK_THROWS_WITH(m.forward_cached_batch(one_token, two, weights, logits), Catch::Contains("1 tokens for 2 sequences"));
  CHECK_THROWS_WITH(m.forward_cached_batch(two_tokens, shared, weights, logits),
                    Catch::Contains("sequences 0 and 1 share a KV cache"));
  m.forward_cached_batch(two_tokens, two, weights, logits);
  m.forward_cached_batch(two_tokens, two, weights, logits);
  CHECK_THROWS_WITH(m.forward_cached_batch(two_tokens, two, weights, logits),
                    Catch::Contains("the KV cache of sequence 0 holds 2 of its 2 positions"));
}
