#pragma once
// Shared by the CUDA tests that run the whole model (tests/cuda/test_cuda_backend.cpp,
// test_nccl_comm.cpp): a tiny LLaMA shape the CUDA kernels support and a packed microbatch of
// ragged sequences over it.
#include <cstdint>
#include <vector>

#include "odc/model/llama_config.h"
#include "odc/model/batch.h"

namespace odc::test::cuda {

inline model::LlamaConfig gpu_tiny_model() {
  model::LlamaConfig c;
  c.vocab_size = 256;
  c.hidden_size = 128;
  c.intermediate_size = 256;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.head_dim = 64;  // the CUDA attention supports 64 and 128
  c.max_position_embeddings = 256;
  return c;
}

inline model::PackedBatch tiny_batch(const model::LlamaConfig& c) {
  model::PackedBatch batch;
  for (int s : {5, 64, 1, 97}) {
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(s));
    for (int i = 0; i < s; ++i) tokens[static_cast<std::size_t>(i)] = (i * 31 + s) % c.vocab_size;
    batch.append(tokens.data(), nullptr, s, 1.0f / 163.0f);
  }
  return batch;
}

}  // namespace odc::test::cuda
