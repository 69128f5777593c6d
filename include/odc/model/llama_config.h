#pragma once
// LlamaConfig: the model shape, with the Hugging Face config.json field names, for the LLaMA
// family (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM).
#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "odc/kernels/rope_scaling.h"

namespace odc::model {

struct LlamaConfig {
  std::int64_t vocab_size = 0;
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;  // 0 in JSON means "same as num_attention_heads"
  int head_dim = 0;             // 0 in JSON means hidden_size / num_attention_heads
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  kernels::RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v biases (Qwen2 has them; o_proj never does)
  // Qwen3's per-head RMSNorm of q and of k (self_attn.q_norm/k_norm.weight, head_dim each, shared
  // by all heads, eps rms_norm_eps), after the projections and before RoPE. Not an HF field:
  // model_type "qwen3" implies it; to_json writes it (and model_type qwen3) only when set, so the
  // JSON of every other model stays what it was.
  bool qk_norm = false;
  std::int64_t max_position_embeddings = 2048;
  double initializer_range = 0.02;
  // The original model's sliding window, 0 = none. Not an HF field (HF's are Mistral's
  // sliding_window, Qwen2's use_sliding_window + sliding_window + max_window_layers, which the HF
  // loader turns into this). Attention here always spans whole sequences, which is exactly the
  // original model on sequences of at most this many tokens: training and generation refuse longer
  // ones, an HF export writes the window back. to_json writes it only when set.
  std::int64_t attention_window = 0;

  int kv_group() const { return num_attention_heads / num_key_value_heads; }
  std::int64_t q_dim() const { return static_cast<std::int64_t>(num_attention_heads) * head_dim; }
  std::int64_t kv_dim() const { return static_cast<std::int64_t>(num_key_value_heads) * head_dim; }

  // Parses HF config.json fields. `where` names the source for errors (file or config key).
  // strict: unknown fields are errors (YAML written by users); otherwise fields this trainer does
  // not use are ignored (config.json files carry many).
  static LlamaConfig from_json(const nlohmann::json& j, const std::string& where, bool strict);
  nlohmann::json to_json() const;

  // Throws odc::Error naming the offending field when the shape is not a valid model.
  void validate(const std::string& where) const;

  std::int64_t num_parameters() const;
  // Forward+backward FLOPs of the linear layers per token (6 * matmul parameters; the norms,
  // q/k norms included, are element-wise and not counted, as everywhere in MFU accounting).
  double linear_flops_per_token() const;
  // Forward+backward FLOPs of causal attention per (query, key <= query) pair: 4*q_dim forward
  // (scores and P.V), 8*q_dim backward, in every layer. A sequence of s tokens has s(s+1)/2 pairs.
  double attention_flops_per_pair() const;
  // Training FLOPs of a microbatch (docs/performance.md, "FLOPs and MFU").
  double training_flops(double tokens, double causal_pairs) const {
    return linear_flops_per_token() * tokens + attention_flops_per_pair() * causal_pairs;
  }
};

}  // namespace odc::model
