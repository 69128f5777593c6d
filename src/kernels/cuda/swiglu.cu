#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "odc/kernels/cuda_device.h"
#include "odc/kernels/cuda_ops.h"
#include "elementwise.cuh"

namespace odc::kernels::cuda {
namespace {

using elementwise::blocks_for;
using elementwise::kThreads;

// 1 / (1 + exp(-g)): expf overflows to inf for very negative g, giving 0 (not NaN).
__device__ __forceinline__ float sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

using elementwise::for_each;
using elementwise::kVecWidth;
using elementwise::load8;
using elementwise::Pack8;
using elementwise::store8;
using Bf16x8 = Pack8<__nv_bfloat16>;

__device__ __forceinline__ __nv_bfloat16 swiglu_h(__nv_bfloat16 gate, __nv_bfloat16 up) {
  const float g = __bfloat162float(gate);
  return __float2bfloat16_rn(g * sigmoid(g) * __bfloat162float(up));
}

// kVec: 8 elements per step in 16-byte accesses (elementwise.cuh); the same bits either way.
template <bool kVec>
__global__ void swiglu_forward_kernel(const __nv_bfloat16* gate, const __nv_bfloat16* up,
                                      __nv_bfloat16* h, std::int64_t n) {
  for_each<kVec>(
      n,
      [&](std::int64_t i) {
        const Bf16x8 g = load8(gate + i), u = load8(up + i);
        Bf16x8 out;
        for (int j = 0; j < kVecWidth; ++j) out.v[j] = swiglu_h(g.v[j], u.v[j]);
        store8(h + i, out);
      },
      [&](std::int64_t i) { h[i] = swiglu_h(gate[i], up[i]); });
}

// d silu(g)/dg = s * (1 + g*(1-s)), s = sigmoid(g). All inputs are read before either output is
// written (outputs may alias dh).
__device__ __forceinline__ void swiglu_grads(__nv_bfloat16 dh, __nv_bfloat16 gate, __nv_bfloat16 up,
                                             __nv_bfloat16& dgate, __nv_bfloat16& dup) {
  const float d = __bfloat162float(dh);
  const float g = __bfloat162float(gate);
  const float u = __bfloat162float(up);
  const float s = sigmoid(g);
  dup = __float2bfloat16_rn(d * g * s);
  dgate = __float2bfloat16_rn(d * u * s * (1.0f + g * (1.0f - s)));
}

template <bool kVec>
__global__ void swiglu_backward_kernel(const __nv_bfloat16* dh, const __nv_bfloat16* gate,
                                       const __nv_bfloat16* up, __nv_bfloat16* dgate,
                                       __nv_bfloat16* dup, std::int64_t n) {
  for_each<kVec>(
      n,
      [&](std::int64_t i) {
        const Bf16x8 d = load8(dh + i), g = load8(gate + i), u = load8(up + i);
        Bf16x8 dg, du;
        for (int j = 0; j < kVecWidth; ++j) swiglu_grads(d.v[j], g.v[j], u.v[j], dg.v[j], du.v[j]);
        store8(dup + i, du);
        store8(dgate + i, dg);
      },
      [&](std::int64_t i) {
        __nv_bfloat16 dg, du;
        swiglu_grads(dh[i], gate[i], up[i], dg, du);
        dup[i] = du;
        dgate[i] = dg;
      });
}

}  // namespace

void swiglu_forward(const std::uint16_t* gate, const std::uint16_t* up, std::uint16_t* h,
                    std::int64_t n, void* stream) {
  if (n <= 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  const auto* g = reinterpret_cast<const __nv_bfloat16*>(gate);
  const auto* u = reinterpret_cast<const __nv_bfloat16*>(up);
  auto* o = reinterpret_cast<__nv_bfloat16*>(h);
  if (elementwise::aligned16(gate) && elementwise::aligned16(up) && elementwise::aligned16(h)) {
    swiglu_forward_kernel<true><<<blocks_for(n, true), kThreads, 0, s>>>(g, u, o, n);
  } else {
    swiglu_forward_kernel<false><<<blocks_for(n), kThreads, 0, s>>>(g, u, o, n);
  }
  check_last_launch("swiglu_forward_kernel");
}

void swiglu_backward(const std::uint16_t* dh, const std::uint16_t* gate, const std::uint16_t* up,
                     std::uint16_t* dgate, std::uint16_t* dup, std::int64_t n, void* stream) {
  if (n <= 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  const auto* d = reinterpret_cast<const __nv_bfloat16*>(dh);
  const auto* g = reinterpret_cast<const __nv_bfloat16*>(gate);
  const auto* u = reinterpret_cast<const __nv_bfloat16*>(up);
  auto* dg = reinterpret_cast<__nv_bfloat16*>(dgate);
  auto* du = reinterpret_cast<__nv_bfloat16*>(dup);
  const bool vec = elementwise::aligned16(dh) && elementwise::aligned16(gate) && elementwise::aligned16(up) &&
                   elementwise::aligned16(dgate) && elementwise::aligned16(dup);
  if (vec) {
    swiglu_backward_kernel<true><<<blocks_for(n, true), kThreads, 0, s>>>(d, g, u, dg, du, n);
  } else {
    swiglu_backward_kernel<false><<<blocks_for(n), kThreads, 0, s>>>(d, g, u, dg, du, n);
  }
  check_last_launch("swiglu_backward_kernel");
}

}  // namespace odc::kernels::cuda
