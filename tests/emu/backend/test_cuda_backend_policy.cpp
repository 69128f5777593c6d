// The CUDA backend's policy objective (cuda_backend_policy.cpp: row_entropy, policy_coefficients,
// resolve_policy over the emulated kernels) inside LlamaModel's head: two GRPO microbatches on
// CudaBackend against CpuBackend(1, DType::bf16), each with its own sums (the device accumulator
// is read and emptied once per head), at a temperature other than 1, with the KL penalty and the
// entropy metric. This is the GPU's policy step, run on the CPU.
//
// Tolerances: both sides round the same values to bf16 at the same points, but the fp32
// accumulation orders differ (GEMMs, attention; test_cuda_backend_model.cpp), so a logit, here
// also scaled by 1/T in bf16, can round to the neighbouring bf16 value on one side: 2^-8 of it.
// A row's nll then moves by up to ~1e-3 and its ratio exp(-nll - old) by as much relative; the KL
// term r (e^d - d - 1) ~ r d^2 / 2 by 2 / |d| times that (|d| ~ 0.1 here). Measured (relative, the
// two microbatches): loss 1.3e-4 and 2.4e-5, KL 1.0e-3 and 2.2e-5, ratio sum 8.9e-5 and 9.7e-6,
// nll sum 1.7e-6, entropy sum 2.4e-8 and 2.1e-7, gradients 2.9e-3 normwise. Bounds: loss, ratio
// sum, min and max 1e-3; KL 1e-2; nll and entropy sums 1e-4 (the rows' errors have both signs);
// gradients 1e-2 normwise as for cross-entropy. Token counts are exact; so are the clip counts of
// these fixed inputs (a ratio that close to a clip bound would flip one; none is, and both sides
// are deterministic). Each microbatch's sums are its own: the accumulator is emptied per head.
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
#include "unit/synthetic_data.h"
#include "odc/model/llama_model.h"

using namespace odc;

namespace {

kernels::PolicyLossParams policy_params() {
  kernels::PolicyLossParams p;
  p.clip_high = 0.28;
  p.kl_beta = 0.04;
  p.temperature = 0.8;
  return p;
}

// Sequences of the given lengths with their policy inputs: the sampling log-probabilities spread
// around the fresh model's (about -log 256 at T 0.8 too) so that ratios fall inside and outside
// the clip range; advantages of both signs.
model::PackedBatch policy_batch(const std::vector<int>& lengths, std::uint32_t seed) {
  test::Lcg rng(seed);  // the same inputs on every platform
  const auto uniform = [&] { return static_cast<float>(rng.next() >> 8) / static_cast<float>(1u << 24); };
  model::PackedBatch batch;
  int total = 0;
  for (int s : lengths) total += s - 1;
  for (std::size_t k = 0; k < lengths.size(); ++k) {
    const int s = lengths[k];
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(s));
    std::vector<float> old(tokens.size()), ref(tokens.size());
    for (int i = 0; i < s; ++i) {
      tokens[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(uniform() * 256.0f) % 256;
      old[static_cast<std::size_t>(i)] = -5.55f + 1.2f * (uniform() - 0.5f);
      ref[static_cast<std::size_t>(i)] = -5.55f + 0.4f * (uniform() - 0.5f);
    }
    batch.append(tokens.data(), nullptr, s, 1.0f / static_cast<float>(total));
    batch.append_policy(old, ref, k % 2 == 0 ? 1.0f + uniform() : -1.0f - uniform());
  }
  return batch;
}

struct Steps {
  std::vector<model::MicrobatchResult> results;  // per microbatch
  std::vector<float> grads;                      // summed over the microbatches, every unit
};

Steps run(std::unique_ptr<backend::Backend> be, bool device_store) {
  const auto config = test::cuda::gpu_tiny_model();
  model::LlamaModel m(config, std::move(be));
  m.set_policy_objective(policy_params(), true);
  const distributed::ShardLayout layout(m.units(), 1, 0);
  distributed::ShardStore store(layout, m.units(), config, 3, {}, device_store ? &m.backend() : nullptr);
  distributed::LocalComm comm(store);
  comm.begin_minibatch();
  Steps s;
  s.results.push_back(m.train_microbatch(policy_batch({5, 64, 1, 97}, 11), comm, comm));
  s.results.push_back(m.train_microbatch(policy_batch({40, 33, 70}, 12), comm, comm));
  s.grads.resize(static_cast<std::size_t>(layout.owned_elements()));
  if (device_store) {
    m.backend().download(store.grads_view(), s.grads);
  } else {
    std::memcpy(s.grads.data(), store.grads_view().data, s.grads.size() * sizeof(float));
  }
  return s;
}

double rel(double got, double want) { return std::fabs(got - want) / std::fabs(want); }

}  // namespace

TEST_CASE("emu CudaBackend: GRPO microbatches agree with the CPU bf16 backend, sums read once per head",
          "[emu][cuda_backend][policy]") {
  const Steps cpu = run(std::make_unique<backend::CpuBackend>(1, DType::bf16), false);
  const Steps gpu = run(std::make_unique<backend::CudaBackend>(0), true);
  for (std::size_t k = 0; k < cpu.results.size(); ++k) {
    const auto& c = cpu.results[k].policy;
    const auto& g = gpu.results[k].policy;
    INFO("microbatch " << k);
    std::printf("[emu-cuda-policy] microbatch %zu: tokens %.0f clipped %.0f/%.0f ratio [%.4f, %.4f]; rel loss %.2e "
                "kl %.2e ratio %.2e nll %.2e entropy %.2e\n", k, g.tokens, g.clipped_low, g.clipped_high, g.ratio_min,
                g.ratio_max, rel(g.loss, c.loss), rel(g.kl, c.kl), rel(g.ratio, c.ratio), rel(g.nll, c.nll),
                rel(g.entropy, c.entropy));
    CHECK(g.tokens == c.tokens);
    CHECK(g.tokens == gpu.results[k].target_tokens);
    CHECK(g.clipped_low == c.clipped_low);
    CHECK(g.clipped_high == c.clipped_high);
    CHECK(c.clipped_low > 0);
    CHECK(c.clipped_high > 0);
    CHECK(rel(g.loss, c.loss) <= 1e-3);
    CHECK(rel(g.kl, c.kl) <= 1e-2);
    CHECK(rel(g.ratio, c.ratio) <= 1e-3);
    CHECK(rel(g.ratio_min, c.ratio_min) <= 1e-3);
    CHECK(rel(g.ratio_max, c.ratio_max) <= 1e-3);
    CHECK(rel(g.nll, c.nll) <= 1e-4);
    CHECK(rel(g.entropy, c.entropy) <= 1e-4);
    CHECK(gpu.results[k].weighted_loss == g.loss);
    CHECK(gpu.results[k].nll_sum == g.nll);
  }
  const double e = test::cuda::normwise(gpu.grads, cpu.grads);
  std::printf("[emu-cuda-policy] gradients normwise %.3e\n", e);
  CHECK(e <= 1e-2);
}
