#pragma once
// Shared by the CUDA tests that run the whole model or a comm (tests/cuda/test_cuda_backend.cpp,
// test_nccl_comm.cpp, test_ipc_comm.cpp) and the emulated CUDA backend's (tests/emu/backend): a tiny LLaMA shape the CUDA kernels support, a packed
// microbatch of ragged sequences over it, and fp32 copies between host vectors and a backend.
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "odc/backend/backend.h"
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

// The tiny shape as Qwen3: per-head q/k norms, q 128 wide where hidden_size is 96, tied embeddings.
inline model::LlamaConfig gpu_tiny_qwen3_model() {
  model::LlamaConfig c = gpu_tiny_model();
  c.qk_norm = true;
  c.hidden_size = 96;
  c.tie_word_embeddings = true;
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

// ||got - want|| / ||want|| (the absolute norm where want is 0; infinite when got is not finite):
// the normwise relative error the model-level comparisons bound.
inline double normwise(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double d = double(got[i]) - want[i];
    num += d * d;
    den += double(want[i]) * want[i];
  }
  if (!std::isfinite(num)) return INFINITY;
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// `count` fp32 elements of the backend's memory at `data`, on the host.
inline std::vector<float> download(backend::Backend& gpu, const float* data, std::int64_t count) {
  std::vector<float> out(static_cast<std::size_t>(count));
  gpu.download(backend::ConstView{data, DType::f32, gpu.device(), count}, out);
  return out;
}

// `host` copied to `target` in the backend's memory (complete on return).
inline void upload(backend::Backend& gpu, const std::vector<float>& host, float* target) {
  backend::Buffer staging(gpu.memory(), DType::f32);
  const auto n = static_cast<std::int64_t>(host.size());
  gpu.copy(gpu.upload(std::span<const float>(host), staging), backend::View{target, DType::f32, gpu.device(), n});
  gpu.synchronize();  // the staging buffer goes when this returns
}

}  // namespace odc::test::cuda
