// The CUDA backend itself (src/backend/cuda_backend.cpp, cuda_backend_ops.cpp: its memory, staging,
// weight casts, attention plan, loss sums, reductions) over the emulated kernels and runtime: one
// LlamaModel training microbatch on CudaBackend against the CPU backend's bf16 mode
// (CpuBackend(1, DType::bf16): bf16 storage of activations and weights, fp32 accumulation, the
// same rounding points as the GPU path). This is the GPU training step, run on the CPU.
//
// Tolerances: both sides round the same values to bf16 at the same points; what differs is the
// fp32 accumulation order inside the GEMMs, attention (tensor-core fragment order, online softmax
// rescaling), reductions, and the bf16 rounding of P/dS in the attention, each a relative error of
// order 2^-9 on a few elements, not compounding systematically over two layers. Measured (this
// config): loss 5.5e-7 relative; gradients normwise 4.2e-3 (embedding), 3.6e-3 and 2.3e-3 (the
// layers), 1.4e-3 (head). Bounds: loss 1e-3 relative, gradients 1e-2 normwise per unit (2.4x the
// worst measured; a wrong index, transpose, mask or a
// missing term gives errors of order 1). The emulated step must also repeat bit for bit.
// The same for a Qwen3-shaped model (per-head q/k RMSNorm through the backend's rmsnorm ops on
// tokens x heads rows of head_dim, in place in backward; q 128 wide where hidden_size is 96;
// tied), same bounds, and the q/k norm weights' gradients checked on their own. Measured: loss
// 5.8e-6; gradients 4.3e-3, 4.3e-3 and 2.8e-3, 2.1e-3 (head); q/k norm weights <= 5.5e-3.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "odc/backend/cpu_backend.h"
#include "cuda/cuda_model_support.h"
#include "odc/backend/cuda_backend.h"
#include "odc/distributed/comm/local_comm.h"
#include "odc/distributed/shard/shard_store.h"
#include "odc/model/llama_model.h"

using namespace odc;

namespace {

model::LlamaConfig tiny_model(bool qwen3) {
  return qwen3 ? test::cuda::gpu_tiny_qwen3_model() : test::cuda::gpu_tiny_model();
}

// Ragged sequences: 5, 64 (one full dQ tile), 1, 97 (crosses the 64-row tiles).
model::PackedBatch tiny_batch(const model::LlamaConfig& c) {
  model::PackedBatch batch;
  for (int s : {5, 64, 1, 97}) {
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(s));
    for (int i = 0; i < s; ++i) tokens[static_cast<std::size_t>(i)] = (i * 31 + s * 7) % c.vocab_size;
    batch.append(tokens.data(), nullptr, s, 1.0f / 163.0f);
  }
  return batch;
}

struct Step {
  model::MicrobatchResult result;
  std::vector<std::vector<float>> grads;  // per unit
  std::vector<std::string> names;
};

// One microbatch from fresh parameters (ShardStore seed 3) on `backend`; gradients per unit.
Step run_step(std::unique_ptr<backend::Backend> be, bool device_store, bool qwen3) {
  const auto config = tiny_model(qwen3);
  const auto batch = tiny_batch(config);
  model::LlamaModel m(config, std::move(be));
  const distributed::ShardLayout layout(m.units(), 1, 0);
  distributed::ShardStore store(layout, m.units(), config, 3, {}, device_store ? &m.backend() : nullptr);
  distributed::LocalComm comm(store);
  comm.begin_minibatch();
  Step s;
  s.result = m.train_microbatch(batch, comm, comm);
  std::vector<float> all(static_cast<std::size_t>(layout.owned_elements()));
  if (device_store) {
    m.backend().download(store.grads_view(), all);
  } else {
    std::memcpy(all.data(), store.grads_view().data, all.size() * sizeof(float));
  }
  for (int u = 0; u < layout.num_units(); ++u) {
    const auto at = static_cast<std::size_t>(store.offset(u)), n = static_cast<std::size_t>(store.shard_size(u));
    s.grads.emplace_back(all.begin() + static_cast<std::ptrdiff_t>(at), all.begin() + static_cast<std::ptrdiff_t>(at + n));
    s.names.push_back(m.units()[static_cast<std::size_t>(u)].name);
  }
  return s;
}

}  // namespace

TEST_CASE("emu CudaBackend: a LlamaModel microbatch agrees with the CPU bf16 backend and repeats bitwise",
          "[emu][cuda_backend]") {
  const bool qwen3 = GENERATE(false, true);
  INFO("qwen3 " << qwen3);
  const Step cpu = run_step(std::make_unique<backend::CpuBackend>(1, DType::bf16), false, qwen3);
  const Step gpu = run_step(std::make_unique<backend::CudaBackend>(0), true, qwen3);
  const double loss_rel = std::fabs(gpu.result.weighted_loss - cpu.result.weighted_loss) /
                          std::fabs(cpu.result.weighted_loss);
  std::printf("[emu-cuda-backend]%s loss cpu-bf16 %.9f emulated-cuda %.9f rel %.3e\n", qwen3 ? " qwen3" : "",
              cpu.result.weighted_loss, gpu.result.weighted_loss, loss_rel);
  CHECK(gpu.result.target_tokens == cpu.result.target_tokens);
  CHECK(loss_rel <= 1e-3);
  REQUIRE(gpu.grads.size() == cpu.grads.size());
  for (std::size_t u = 0; u < cpu.grads.size(); ++u) {
    const double e = test::cuda::normwise(gpu.grads[u], cpu.grads[u]);
    std::printf("[emu-cuda-backend] %-24s n=%-7zu normwise %.3e\n", cpu.names[u].c_str(), cpu.grads[u].size(), e);
    INFO(cpu.names[u] << ": normwise " << e);
    CHECK(e <= 1e-2);
  }
  // The q/k norm weights' gradients on their own: a few dozen values among a layer's 10^5, which
  // the per-unit error would not see (sums over tokens x heads rows, fp32 on both sides).
  const auto units = model::build_unit_layouts(tiny_model(qwen3));
  for (std::size_t u = 0; u < units.size(); ++u) {
    for (const auto& t : units[u].tensors) {
      if (!t.name.ends_with("q_norm.weight") && !t.name.ends_with("k_norm.weight")) continue;
      const auto slice = [&](const std::vector<float>& g) {
        return std::vector<float>(g.begin() + t.offset, g.begin() + t.offset + t.numel);
      };
      const double e = test::cuda::normwise(slice(gpu.grads[u]), slice(cpu.grads[u]));
      std::printf("[emu-cuda-backend] %-40s normwise %.3e\n", t.name.c_str(), e);
      INFO(t.name << ": normwise " << e);
      CHECK(e <= 1e-2);
    }
  }
  const Step again = run_step(std::make_unique<backend::CudaBackend>(0), true, qwen3);
  CHECK(std::memcmp(&again.result.weighted_loss, &gpu.result.weighted_loss, sizeof(double)) == 0);
  for (std::size_t u = 0; u < gpu.grads.size(); ++u) {
    INFO(gpu.names[u]);
    CHECK(std::memcmp(again.grads[u].data(), gpu.grads[u].data(), gpu.grads[u].size() * sizeof(float)) == 0);
  }
}
