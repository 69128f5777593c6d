// Batched decoding through the CUDA backend's host code over the emulated kernels:
// LlamaModel::forward_cached_batch of ragged sequences (an empty cache, one prompt token, longer
// prompts) on CudaBackend, whose attention_decode_batch uploads the table of the sequences' caches
// through the pinned staging and runs one launch per layer, against
//   - the same backend with set_per_sequence_decode (the Backend default: two copies and an
//     attention_cached launch per sequence and layer): bitwise the same logits at every step;
//   - CpuBackend(1, DType::bf16), the same rounding points on the CPU: logits within 2e-2
//     normwise per step. Both sides feed the same tokens (teacher forcing: a near-tie cannot make
//     them diverge); what may differ is the fp32 summation order of the GEMMs and of the
//     attention, each able to flip an activation to a neighbouring bf16 value (2^-8 relative)
//     that carries through two layers (measured here: 0, every rounding landed alike; printed);
//     a wrong cache row, position or sequence gives errors of order 1;
// and counts the launches: one decode launch per layer and step, none of the per-sequence kernel
// (which the per-sequence path launches once per sequence, layer and step).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "emu_block.h"
#include "odc/backend/cpu_backend.h"
#include "cuda/cuda_model_support.h"
#include "odc/backend/cuda_backend.h"
#include "odc/model/kv_cache.h"
#include "odc/model/llama_model.h"
#include "support/resident_weights.h"

using namespace odc;

namespace {

// The GPU tests' tiny shape with two kv heads of two query heads each.
model::LlamaConfig tiny_model() {
  model::LlamaConfig c = test::cuda::gpu_tiny_model();
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 128;
  return c;
}

constexpr int kSteps = 6;
const std::vector<int> kPrompts{3, 0, 17, 1, 40};

// Every step's logits of the sequences (prompts prefilled alone, then kSteps batched tokens), and
// the decode kernels' launches during the batched steps.
struct Decoded {
  std::vector<std::vector<float>> steps;
  std::uint64_t batch_launches = 0, cached_launches = 0;
};

Decoded decode(backend::Backend& b, model::LlamaModel& m, bool per_sequence) {
  const auto& c = m.config();
  bench::ResidentWeights weights(b, m.units(), c, 7);
  const std::vector<int>& prompts = kPrompts;
  std::vector<model::KvCache> caches;
  std::vector<model::KvCache*> pointers;
  std::vector<float> logits;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    caches.emplace_back(b, c, 64);
    std::vector<std::int32_t> prompt;
    for (int t = 0; t < prompts[i]; ++t)
      prompt.push_back(static_cast<std::int32_t>((t * 29 + 7 * i + 1) % c.vocab_size));
    if (!prompt.empty()) m.forward_cached(prompt, caches.back(), weights, logits);
  }
  for (auto& cache : caches) pointers.push_back(&cache);
  b.set_per_sequence_decode(per_sequence);
  Decoded out;
  const std::uint64_t batch0 = odc_emu::launch_count("attention_decode_batch_kernel"),
                      cached0 = odc_emu::launch_count("attention_cached_kernel");
  for (int step = 0; step < kSteps; ++step) {
    std::vector<std::int32_t> next;
    for (std::size_t i = 0; i < prompts.size(); ++i)
      next.push_back(static_cast<std::int32_t>((step * 53 + 11 * i) % c.vocab_size));
    m.forward_cached_batch(next, pointers, weights, logits);
    out.steps.push_back(logits);
  }
  out.batch_launches = odc_emu::launch_count("attention_decode_batch_kernel") - batch0;
  out.cached_launches = odc_emu::launch_count("attention_cached_kernel") - cached0;
  b.set_per_sequence_decode(false);
  return out;
}

}  // namespace

TEST_CASE(
    "emu CudaBackend: forward_cached_batch in one decode launch per layer is bitwise the per-sequence "
    "launches and agrees with the CPU bf16 backend",
    "[emu][cuda_backend][decode]") {
  model::LlamaModel gpu(tiny_model(), std::make_unique<backend::CudaBackend>(0));
  model::LlamaModel cpu(tiny_model(), std::make_unique<backend::CpuBackend>(1, DType::bf16));
  const Decoded batched = decode(gpu.backend(), gpu, false);
  const Decoded looped = decode(gpu.backend(), gpu, true);
  const Decoded reference = decode(cpu.backend(), cpu, false);
  // One launch per layer and step for every sequence at once; the per-sequence path one per
  // sequence, layer and step.
  const auto layers = static_cast<std::uint64_t>(tiny_model().num_hidden_layers);
  CHECK(batched.batch_launches == layers * kSteps);
  CHECK(batched.cached_launches == 0);
  CHECK(looped.batch_launches == 0);
  CHECK(looped.cached_launches == layers * kSteps * kPrompts.size());
  REQUIRE(batched.steps.size() == reference.steps.size());
  for (std::size_t step = 0; step < batched.steps.size(); ++step) {
    INFO("step " << step);
    CHECK(std::memcmp(batched.steps[step].data(), looped.steps[step].data(),
                      batched.steps[step].size() * sizeof(float)) == 0);
    const double e = test::cuda::normwise(batched.steps[step], reference.steps[step]);
    std::printf("[emu-cuda-decode] step %zu logits normwise vs cpu-bf16 %.3e\n", step, e);
    CHECK(e <= 2e-2);
  }
}
