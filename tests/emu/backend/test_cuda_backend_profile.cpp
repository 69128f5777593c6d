// The op profiler over the CUDA backend (its event timeline, CudaBackend::make_timeline) on the
// emulated kernels and runtime: two training steps recorded at once outgrow the timeline's first
// pool of events (256 marks), a later recording reuses them, and the categories the profiler
// records on the CUDA backend are exactly those the step estimate predicts for a CUDA run (bf16
// activations and weight copies: the calls, FLOPs and bytes; the gradient norm is one call per
// unit here, one per shard in a trainer). The emulated events measure no time (every interval
// reads 0): what a real GPU's events measure is tests/cuda/test_cuda_op_profiler.cpp's.
#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "cuda/cuda_model_support.h"
#include "odc/backend/cuda_backend.h"
#include "odc/backend/op_profiler.h"
#include "odc/kernels/adamw.h"
#include "odc/model/llama_model.h"
#include "support/resident_weights.h"
#include "odc/train/plan/step_estimate.h"

using namespace odc;

namespace {

}  // namespace

TEST_CASE("emu CudaBackend: the profiler's event timeline grows, is reused, and records the predicted calls",
          "[emu][cuda_backend][profile]") {
  const auto c = test::cuda::gpu_tiny_model();
  auto wrapped = std::make_unique<backend::ProfilingBackend>(
      std::make_unique<backend::CudaBackend>(0),
      backend::llama_gemm_classifier({c.hidden_size, c.q_dim(), c.kv_dim(), c.intermediate_size, c.vocab_size}));
  backend::ProfilingBackend& profiler = *wrapped;
  model::LlamaModel m(c, std::move(wrapped));
  bench::ResidentWeights weights(m.backend(), m.units(), c, 3);
  model::PackedBatch batch;
  for (int s = 0; s < 2; ++s) {
    std::vector<std::int32_t> tokens(48);
    for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int32_t>((i * 31 + 7 * s) % 256);
    batch.append(tokens.data(), nullptr, static_cast<std::int64_t>(tokens.size()), 0.01f);
  }
  const auto step = [&](int n) {
    weights.zero_gradients();
    profiler.start();
    for (int i = 0; i < n; ++i) {
      m.train_microbatch(batch, weights, weights);
      for (int u = 0; u < weights.num_units(); ++u) {
        m.backend().sum_of_squares(m.backend().gradients(weights.grad_buffer(u), m.units()[static_cast<std::size_t>(u)].numel));
      }
      kernels::AdamWParams params;
      params.step = i + 1;
      weights.adamw_step(params);
    }
    return profiler.stop();
  };

  train::StepShape shape;
  shape.model = c;
  shape.device = DeviceKind::cuda;
  shape.compute = DType::bf16;
  shape.tokens = 96;
  shape.sequences = 2;
  shape.optimizer_elements = c.num_parameters();
  backend::OpProfile predicted;
  for (const auto& p : train::predict_ops(shape)) {
    backend::OpCategory& op = predicted.at(p.op.name, p.op.role);
    op.calls += p.op.calls;
    op.flops += p.op.flops;
    op.bytes += p.op.bytes;
  }
  for (const int steps : {2, 1}) {  // 2 steps: ~320 marks, past the first 256 events; then reused
    INFO(steps << " step(s)");
    const backend::OpProfile measured = step(steps);
    CHECK(measured.ops.size() == predicted.ops.size());
    std::int64_t calls = 0;
    for (const auto& op : measured.ops) {
      INFO(op.label());
      calls += op.calls;
      CHECK(op.seconds >= 0);
      const backend::OpCategory* p = predicted.find(op.name, op.role);
      REQUIRE(p != nullptr);
      CHECK(op.flops == p->flops * steps);
      CHECK(op.bytes == p->bytes * steps);
      if (op.name != "sum_of_squares") CHECK(op.calls == p->calls * steps);
    }
    if (steps == 2) CHECK(2 * calls > 256);  // two marks per call
  }
}
