#pragma once
// Shared by the CUDA backend tests (test_cuda_backend.cpp, test_cuda_bf16_mode.cpp): the same
// bf16-representable values on a CPU backend and the CUDA backend, so both ops see exactly the
// same numbers and only their arithmetic differs.
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "odc/backend/cpu_backend.h"
#include "odc/backend/cuda_backend.h"
#include "odc/core/dtype.h"

namespace odc::test::cuda {

// Random normal values already rounded to bf16 (so either side holds them exactly).
inline std::vector<float> bf16_values(std::size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> out(n);
  for (auto& v : out) v = bf16_to_f32(f32_to_bf16(dist(rng)));
  return out;
}

// One tensor on both backends: an fp32 host buffer on the CPU (its fp32 mode and its bf16 mode
// both keep fp32 buffers), the given dtype on the GPU.
struct Pair {
  backend::Buffer cpu, gpu;
  backend::View c, g;
  Pair(backend::CpuBackend& cb, backend::CudaBackend& gb, const std::vector<float>& host, DType gpu_dtype)
      : cpu(cb.memory(), DType::f32), gpu(gb.memory(), gpu_dtype) {
    const auto n = static_cast<std::int64_t>(host.size());
    c = cpu.get(n);
    std::memcpy(c.data, host.data(), host.size() * sizeof(float));
    g = gpu.get(n);
    backend::Buffer staging(gb.memory(), DType::f32);
    const backend::ConstView up = gb.upload(std::span<const float>(host), staging);
    if (gpu_dtype == DType::f32) {
      gb.copy(up, g);
    } else {
      // bf16: through a bf16 weights() copy of the fp32 upload (exact: the values are bf16 already).
      gb.copy(gb.weights(static_cast<const float*>(up.data), n), g);
      gb.release_weights(static_cast<const float*>(up.data));
    }
    gb.synchronize();
  }
  // Zeros of `n` elements (an output).
  Pair(backend::CpuBackend& cb, backend::CudaBackend& gb, std::size_t n, DType gpu_dtype)
      : Pair(cb, gb, std::vector<float>(n), gpu_dtype) {}
  std::vector<float> cpu_values() const {
    const auto* p = static_cast<const float*>(c.data);
    return {p, p + c.count};
  }
  std::vector<float> gpu_values(backend::CudaBackend& gb) const {
    std::vector<float> out(static_cast<std::size_t>(g.count));
    gb.download(g, out);
    return out;
  }
};

}  // namespace odc::test::cuda
