#pragma once
// What the model benchmarks (gpu_model_throughput, rollout_throughput) run: the published shapes,
// and weights of the right scale for them.
//
// The shapes:
// LLaMA-3.2-1B (16 layers, hidden 2048, ffn 8192, 32/8 heads of 64, vocab 128256, tied
// embeddings) and DeepSeek-R1-Distill-Qwen-1.5B (the paper reproduction's configs/gpu8/*-1.5b.yaml:
// 28 layers, hidden 1536, ffn 8960, 12/2 heads of 128, vocab 151936, untied, q/k/v biases).
#include <algorithm>
#include <string>
#include <vector>

#include "odc/core/random.h"
#include "odc/model/llama_config.h"
#include "odc/model/llama_model.h"

namespace odc::bench {

inline model::LlamaConfig llama_1b_shape() {
  model::LlamaConfig c;
  c.vocab_size = 128256;
  c.hidden_size = 2048;
  c.intermediate_size = 8192;
  c.num_hidden_layers = 16;
  c.num_attention_heads = 32;
  c.num_key_value_heads = 8;
  c.head_dim = 64;
  c.rope_theta = 500000.0;
  c.tie_word_embeddings = true;
  return c;
}

inline model::LlamaConfig qwen2_1_5b_shape() {
  model::LlamaConfig c;
  c.vocab_size = 151936;
  c.hidden_size = 1536;
  c.intermediate_size = 8960;
  c.num_hidden_layers = 28;
  c.num_attention_heads = 12;
  c.num_key_value_heads = 2;
  c.head_dim = 128;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 10000.0;
  c.tie_word_embeddings = false;
  c.attention_bias = true;
  return c;
}

// Weights of the right scale (std 0.02 matrices, unit norm weights) without the cost of drawing
// 1.8e9 normals: a 64K-value normal pattern tiled over each unit. Speed does not depend on values.
inline std::vector<std::vector<float>> tiled_weights(const model::LlamaModel& model) {
  std::vector<float> pattern(1 << 16);
  SplitMix64 rng(5);
  for (auto& p : pattern) p = static_cast<float>(0.02 * normal_from_bits(rng.next(), rng.next()));
  std::vector<std::vector<float>> out;
  for (const auto& unit : model.units()) {
    std::vector<float> w(static_cast<std::size_t>(unit.numel));
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = pattern[i % pattern.size()];
    for (const auto& t : unit.tensors) {
      if (t.name.find("norm") != std::string::npos) std::fill_n(w.begin() + t.offset, t.numel, 1.0f);
    }
    out.push_back(std::move(w));
  }
  return out;
}

}  // namespace odc::bench
