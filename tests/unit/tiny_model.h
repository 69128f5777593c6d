#pragma once
// The smallest LLaMA-style shape the unit tests of sharding, checkpoints and reports need: a few
// hundred parameters over embedding, `layers` decoder layers (GQA: 2 query heads, 1 kv head) and
// the head.
#include "odc/model/llama_config.h"

namespace odc::test {

inline model::LlamaConfig tiny_model(int layers = 2) {
  model::LlamaConfig c;
  c.vocab_size = 16;
  c.hidden_size = 8;
  c.intermediate_size = 12;
  c.num_hidden_layers = layers;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.head_dim = 4;
  c.max_position_embeddings = 64;
  return c;
}

}  // namespace odc::test
