#pragma once
// Timing of GPU work for the bench programs: the mean milliseconds per call of fn() over `iters`
// calls after `warmup` untimed ones, between two CUDA events on `stream` (the work fn() issues
// there, not the host's launch overhead alone).
#include "odc/kernels/cuda_device.h"

namespace odc::bench {

template <typename Fn>
double gpu_time_ms(int warmup, int iters, const kernels::cuda::Stream& stream, Fn&& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  kernels::cuda::Event start(true), stop(true);
  start.record(stream);
  for (int i = 0; i < iters; ++i) fn();
  stop.record(stream);
  stop.synchronize();
  return static_cast<double>(start.elapsed_ms(stop)) / iters;
}

}  // namespace odc::bench
