#pragma once
// The published model shapes the model benchmarks run (gpu_model_throughput, rollout_throughput):
// LLaMA-3.2-1B (16 layers, hidden 2048, ffn 8192, 32/8 heads of 64, vocab 128256, tied
// embeddings) and DeepSeek-R1-Distill-Qwen-1.5B (the paper reproduction's configs/gpu8/*-1.5b.yaml:
// 28 layers, hidden 1536, ffn 8960, 12/2 heads of 128, vocab 151936, untied, q/k/v biases).
#include "odc/model/llama_config.h"

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

}  // namespace odc::bench
