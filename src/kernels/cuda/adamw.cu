#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "odc/core/error.h"
#include "odc/kernels/cuda_device.h"
#include "odc/kernels/cuda_ops.h"

namespace odc::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxSegmentsPerLaunch = 64;  // keeps the kernel parameter block under 4 KiB
constexpr std::int64_t kMaxBlocksPerSegment = 1024;

struct DeviceSegment {
  float* param;
  const float* grad;
  float* exp_avg;
  float* exp_avg_sq;
  std::int64_t count;
  float decay;  // 1 - lr*weight_decay, or exactly 1 for segments without decay
};

struct SegmentTable {
  DeviceSegment segments[kMaxSegmentsPerLaunch];
};

struct StepScalars {
  float beta1, one_minus_beta1, beta2, one_minus_beta2, step_size, inv_sqrt_bc2, eps, grad_scale;
};

static_assert(sizeof(SegmentTable) + sizeof(StepScalars) < 4000, "kernel parameters over 4 KiB");

// blockIdx.y selects the segment; blockIdx.x grid-strides over its elements. Same arithmetic (and
// order) as cpu::adamw_step<float>.
__global__ void adamw_multi_kernel(const SegmentTable table, const StepScalars k) {
  const DeviceSegment seg = table.segments[blockIdx.y];
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
       i < seg.count; i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float g = seg.grad[i] * k.grad_scale;
    const float m = k.beta1 * seg.exp_avg[i] + k.one_minus_beta1 * g;
    const float v = k.beta2 * seg.exp_avg_sq[i] + k.one_minus_beta2 * g * g;
    seg.exp_avg[i] = m;
    seg.exp_avg_sq[i] = v;
    seg.param[i] = seg.param[i] * seg.decay - k.step_size * m / (sqrtf(v) * k.inv_sqrt_bc2 + k.eps);
  }
}

}  // namespace

void adamw_step_multi(const std::vector<AdamWSegment>& segments, const AdamWConfig& config,
                      void* stream) {
  if (config.step < 1) {
    throw Error("AdamW step counts from 1, got " + std::to_string(config.step));
  }
  // The per-step scalars in double on the host, as cpu::adamw_step (and torch) do.
  const double bias_correction1 = 1.0 - std::pow(config.beta1, double(config.step));
  const double bias_correction2 = 1.0 - std::pow(config.beta2, double(config.step));
  StepScalars k{};
  k.beta1 = float(config.beta1);
  k.one_minus_beta1 = float(1.0 - config.beta1);
  k.beta2 = float(config.beta2);
  k.one_minus_beta2 = float(1.0 - config.beta2);
  k.step_size = float(config.lr / bias_correction1);
  k.inv_sqrt_bc2 = float(1.0 / std::sqrt(bias_correction2));
  k.eps = float(config.eps);
  k.grad_scale = float(config.grad_scale);
  const float decay = float(1.0 - config.lr * config.weight_decay);

  SegmentTable table{};
  int used = 0;
  std::int64_t largest = 0;
  auto flush = [&] {
    if (used == 0) return;
    const std::int64_t blocks =
        std::min<std::int64_t>((largest + kThreads - 1) / kThreads, kMaxBlocksPerSegment);
    const dim3 grid(static_cast<unsigned>(std::max<std::int64_t>(blocks, 1)),
                    static_cast<unsigned>(used));
    adamw_multi_kernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(table, k);
    check_last_launch("adamw_multi_kernel");
    used = 0;
    largest = 0;
  };
  for (const AdamWSegment& s : segments) {
    if (s.count <= 0) continue;
    table.segments[used] = DeviceSegment{s.param,  s.grad,  s.exp_avg,
                                         s.exp_avg_sq, s.count, s.weight_decay ? decay : 1.0f};
    largest = std::max(largest, s.count);
    if (++used == kMaxSegmentsPerLaunch) flush();
  }
  flush();
}

}  // namespace odc::kernels::cuda
