// LlamaModel::forward_cached over a KvCache against the full forward it replaces in generation:
// the logits after every position agree whether the sequence runs at once, token by token after a
// prefill, or in chunks (so the RoPE positions and the cached keys/values are right), for MHA, GQA
// and MQA shapes, tied embeddings and q/k/v biases, Qwen3's q/k norms with head_dim unlike
// hidden_size / heads; the unit access pattern is forward()'s; the
// cache allocates nothing after its first use; misuse is a clear error.
//
// Tolerance: the two paths run the same fp32 ops on the same values but as GEMMs of other shapes
// (one row instead of all rows) and attention blocked differently, so they differ by summation
// order only: a few fp32 ulps per op through two layers, far below 1e-5 of the logits' scale.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "odc/backend/cpu_backend.h"
#include "odc/core/error.h"
#include "odc/model/kv_cache.h"
#include "odc/model/llama_model.h"
#include "support/resident_weights.h"
#include "unit/synthetic_data.h"

using namespace odc;

namespace {

model::LlamaConfig config_of(int heads, int kv_heads, bool tied_and_bias, bool qwen3 = false) {
  nlohmann::json j = {{"vocab_size", 53},          {"hidden_size", 32},          {"intermediate_size", 48},
                      {"num_hidden_layers", 2},    {"num_attention_heads", heads}, {"num_key_value_heads", kv_heads},
                      {"head_dim", 8},             {"rms_norm_eps", 1e-5},       {"tie_word_embeddings", tied_and_bias},
                      {"attention_bias", tied_and_bias}, {"max_position_embeddings", 64},
                      {"initializer_range", 0.3}};
  if (qwen3) {  // q/k norms, and q is 4 x 12 = 48 wide where hidden_size is 32
    j["model_type"] = "qwen3";
    j["head_dim"] = 12;
  }
  return model::LlamaConfig::from_json(j, "test", true);
}

std::vector<std::int32_t> token_sequence(std::int64_t n, std::int64_t vocab, std::uint32_t seed) {
  test::Lcg rng(seed);
  return test::synthetic_sequence(rng, static_cast<int>(n), static_cast<std::uint32_t>(vocab), 8, 1).tokens;
}

// Logits [tokens, vocab] of the whole sequence in one forward.
std::vector<float> full_logits(model::LlamaModel& m, model::ParamSource& w, const std::vector<std::int32_t>& seq) {
  model::PackedBatch batch;
  batch.append(seq.data(), nullptr, static_cast<std::int64_t>(seq.size()), 0.0f);
  std::vector<float> logits;
  m.forward(batch, w, &logits);
  return logits;
}

// max |a - row r of full| / max |row r of full|.
double row_error(const std::vector<float>& a, const std::vector<float>& full, std::size_t r) {
  double diff = 0, scale = 0;
  for (std::size_t v = 0; v < a.size(); ++v) {
    const double want = full[r * a.size() + v];
    diff = std::max(diff, std::abs(a[v] - want));
    scale = std::max(scale, std::abs(want));
  }
  return diff / scale;
}

// Runs `seq` through the cache in chunks; the worst row error against the full forward.
double chunked_error(model::LlamaModel& m, model::ParamSource& w, const std::vector<std::int32_t>& seq,
                     const std::vector<std::size_t>& chunks) {
  const auto full = full_logits(m, w, seq);
  model::KvCache cache(m.backend(), m.config(), static_cast<std::int64_t>(seq.size()));
  std::vector<float> logits;
  double worst = 0;
  std::size_t done = 0;
  for (const std::size_t n : chunks) {
    m.forward_cached(std::span<const std::int32_t>(seq).subspan(done, n), cache, w, logits);
    done += n;
    REQUIRE(cache.length() == static_cast<std::int64_t>(done));
    REQUIRE(logits.size() == static_cast<std::size_t>(m.config().vocab_size));
    worst = std::max(worst, row_error(logits, full, done - 1));
  }
  REQUIRE(done == seq.size());
  return worst;
}

// Biases start at zero and q/k norm weights at one: give them values, so that a missed bias or
// norm weight would show.
void set_biases(model::LlamaModel& m, bench::ResidentWeights& weights) {
  for (int u = 0; u < m.num_units(); ++u) {
    for (const auto& t : m.units()[static_cast<std::size_t>(u)].tensors) {
      if (!t.name.ends_with(".bias") && !t.name.ends_with("q_norm.weight") && !t.name.ends_with("k_norm.weight")) {
        continue;
      }
      auto w = weights.weights(u);
      const float base = t.name.ends_with(".bias") ? 0.0f : 1.0f;
      for (std::int64_t i = 0; i < t.numel; ++i) {
        w[static_cast<std::size_t>(t.offset + i)] = base + 0.2f * std::sin(0.7f * static_cast<float>(i) + 1);
      }
    }
  }
}

class RecordingSource final : public model::ParamSource {
 public:
  explicit RecordingSource(bench::ResidentWeights& w) : weights(w) {}
  const float* acquire(int u) override {
    log += "A" + std::to_string(u);
    return weights.acquire(u);
  }
  void release(int u) override { log += "R" + std::to_string(u); }
  bench::ResidentWeights& weights;
  std::string log;
};

}  // namespace

TEST_CASE("forward_cached: token-by-token and chunked decoding give the full forward's logits", "[model][kv_cache]") {
  struct Shape {
    int heads, kv_heads;
    bool tied_and_bias;
    bool qwen3 = false;
  };
  for (const Shape shape : {Shape{4, 2, false}, Shape{4, 4, false}, Shape{4, 1, false}, Shape{4, 2, true},
                            Shape{4, 2, false, true}}) {
    const auto config = config_of(shape.heads, shape.kv_heads, shape.tied_and_bias, shape.qwen3);
    model::LlamaModel m(config, std::make_unique<backend::CpuBackend>());
    bench::ResidentWeights weights(m.units(), config, 11);
    set_biases(m, weights);
    const auto seq = token_sequence(40, config.vocab_size, 5u + static_cast<std::uint32_t>(shape.kv_heads));
    INFO("heads " << shape.heads << " kv heads " << shape.kv_heads << " tied+bias " << shape.tied_and_bias << " qwen3 "
                  << shape.qwen3);
    std::vector<std::size_t> prefill_then_tokens = {6};
    prefill_then_tokens.resize(35, 1);
    CHECK(chunked_error(m, weights, seq, prefill_then_tokens) < 1e-5);
    CHECK(chunked_error(m, weights, seq, {1, 3, 17, 1, 18}) < 1e-5);
    CHECK(chunked_error(m, weights, seq, {40}) < 1e-5);
  }
}

TEST_CASE("forward_cached: the logits depend on the position (RoPE) and on the cached tokens", "[model][kv_cache]") {
  // Guards the test above against a model whose logits ignore position or context.
  const auto config = config_of(4, 2, false);
  model::LlamaModel m(config, std::make_unique<backend::CpuBackend>());
  bench::ResidentWeights weights(m.units(), config, 11);
  const std::vector<std::int32_t> a = {3, 9, 4, 4}, b = {7, 9, 4, 4};
  std::vector<float> la, lb, lc;
  model::KvCache cache(m.backend(), config, 8);
  m.forward_cached(a, cache, weights, la);
  cache.clear();
  m.forward_cached(b, cache, weights, lb);  // another first token
  cache.clear();
  m.forward_cached(std::span<const std::int32_t>(a).subspan(1), cache, weights, lc);  // same tokens, earlier positions
  CHECK(row_error(lb, la, 0) > 1e-3);
  CHECK(row_error(lc, la, 0) > 1e-3);
}

TEST_CASE("forward_cached acquires and releases units as forward does, the cache stops allocating",
          "[model][kv_cache]") {
  for (const bool tied : {false, true}) {
    const auto config = config_of(4, 2, tied);
    model::LlamaModel m(config, std::make_unique<backend::CpuBackend>());
    bench::ResidentWeights weights(m.units(), config, 3);
    RecordingSource full(weights), cached(weights);
    const std::vector<std::int32_t> seq = {1, 2, 3, 4, 5};
    model::PackedBatch batch;
    batch.append(seq.data(), nullptr, 5, 0.0f);
    std::vector<float> logits;
    m.forward(batch, full, &logits);
    model::KvCache cache(m.backend(), config, 32);
    m.forward_cached(seq, cache, cached, logits);
    INFO("tied " << tied);
    CHECK(cached.log == full.log);
    const std::int64_t bytes = cache.bytes();
    for (int i = 0; i < 20; ++i) m.forward_cached(std::vector<std::int32_t>{7}, cache, weights, logits);
    CHECK(cache.bytes() == bytes);
    CHECK(cache.length() == 25);
  }
}

TEST_CASE("forward_cached and KvCache reject misuse with clear errors", "[model][kv_cache]") {
  const auto config = config_of(4, 2, false);
  model::LlamaModel m(config, std::make_unique<backend::CpuBackend>());
  bench::ResidentWeights weights(m.units(), config, 3);
  std::vector<float> logits;
  CHECK_THROWS_WITH(model::KvCache(m.backend(), config, 65),
                    Catch::Contains("a KV cache needs 1 to 64 positions (the model's max_position_embeddings), "
                                    "asked for 65"));
  CHECK_THROWS_WITH(model::KvCache(m.backend(), config, 0), Catch::Contains("asked for 0"));
  model::KvCache cache(m.backend(), config, 4);
  m.forward_cached(std::vector<std::int32_t>{1, 2, 3}, cache, weights, logits);
  CHECK_THROWS_WITH(m.forward_cached(std::vector<std::int32_t>{1, 2}, cache, weights, logits),
                    Catch::Contains("the KV cache holds 3 of its 4 positions: 2 more tokens do not fit"));
  CHECK_THROWS_WITH(m.forward_cached(std::vector<std::int32_t>{53}, cache, weights, logits),
                    Catch::Contains("token id 53 at new position 3 is out of range [0, 53)"));
  CHECK_THROWS_WITH(m.forward_cached(std::vector<std::int32_t>{}, cache, weights, logits),
                    Catch::Contains("at least one new token"));
  CHECK(cache.length() == 3);  // failed calls cache nothing
  backend::CpuBackend other;
  model::KvCache foreign(other, config, 4);
  CHECK_THROWS_WITH(m.forward_cached(std::vector<std::int32_t>{1}, foreign, weights, logits),
                    Catch::Contains("made for another backend"));
  const auto wider = config_of(4, 4, false);
  model::KvCache mismatched(m.backend(), wider, 4);
  CHECK_THROWS_WITH(m.forward_cached(std::vector<std::int32_t>{1}, mismatched, weights, logits),
                    Catch::Contains("the KV cache holds 2 layers of width 32, the model has 2 of width 16"));
}

TEST_CASE("kv_cache_bytes: what a fresh KvCache allocates for its keys and values", "[model][kv_cache][memory]") {
  for (const int kv_heads : {1, 2, 4}) {
    const auto config = config_of(4, kv_heads, false);
    backend::CpuBackend backend;
    const model::KvCache cache(backend, config, 40);
    INFO("kv heads " << kv_heads);
    // Before its first use the decoding scratch is empty: the cache holds its keys and values only.
    CHECK(cache.bytes() == model::kv_cache_bytes(config, 40, backend.activation_dtype()));
    CHECK(model::kv_cache_bytes(config, 40, DType::bf16) == 2 * 2 * 40 * kv_heads * 8 * 2);
  }
}
