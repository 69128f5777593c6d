#include <algorithm>
#include <initializer_list>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "odc/kernels/cuda_device.h"
#include "odc/kernels/cuda_ops.h"
#include "elementwise.cuh"

namespace odc::kernels::cuda {
namespace {

using elementwise::kThreads;

// 1 / (1 + exp(-g)): expf overflows to inf for very negative g, giving 0 (not NaN).
__device__ __forceinline__ float sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

using elementwise::kVecWidth;
using elementwise::load8;
using elementwise::Pack8;
using elementwise::store8;
using Bf16x8 = Pack8<__nv_bfloat16>;

__device__ __forceinline__ __nv_bfloat16 swiglu_h(__nv_bfloat16 gate, __nv_bfloat16 up) {
  const float g = __bfloat162float(gate);
  return __float2bfloat16_rn(g * sigmoid(g) * __bfloat162float(up));
}

// d silu(g)/dg = s * (1 + g*(1-s)), s = sigmoid(g).
__device__ __forceinline__ void swiglu_grads(__nv_bfloat16 dh, __nv_bfloat16 gate, __nv_bfloat16 up,
                                             __nv_bfloat16& dgate, __nv_bfloat16& dup) {
  const float d = __bfloat162float(dh);
  const float g = __bfloat162float(gate);
  const float u = __bfloat162float(up);
  const float s = sigmoid(g);
  dup = __float2bfloat16_rn(d * g * s);
  dgate = __float2bfloat16_rn(d * u * s * (1.0f + g * (1.0f - s)));
}

// Rows over the grid's y (grid-stride), a row's columns over x: column j of row r reads gate and
// up at r * ld + j and writes h at r * width + j (no division per element). kVec: 8 columns per
// step in 16-byte accesses (elementwise.cuh; width and ld multiples of 8), the same bits.
template <bool kVec>
__global__ void swiglu_forward_kernel(const __nv_bfloat16* gate, const __nv_bfloat16* up, std::int64_t ld,
                                      __nv_bfloat16* h, std::int64_t rows, std::int64_t width) {
  const std::int64_t step = kVec ? kVecWidth : 1;
  for (std::int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const __nv_bfloat16* g = gate + r * ld;
    const __nv_bfloat16* u = up + r * ld;
    __nv_bfloat16* out = h + r * width;
    for (std::int64_t j = (blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x) * step; j < width;
         j += static_cast<std::int64_t>(gridDim.x) * blockDim.x * step) {
      if constexpr (kVec) {
        const Bf16x8 gv = load8(g + j), uv = load8(u + j);
        Bf16x8 hv;
        for (int e = 0; e < kVecWidth; ++e) hv.v[e] = swiglu_h(gv.v[e], uv.v[e]);
        store8(out + j, hv);
      } else {
        out[j] = swiglu_h(g[j], u[j]);
      }
    }
  }
}

template <bool kVec>
__global__ void swiglu_backward_kernel(const __nv_bfloat16* dh, const __nv_bfloat16* gate,
                                       const __nv_bfloat16* up, std::int64_t ld, __nv_bfloat16* dgate,
                                       __nv_bfloat16* dup, std::int64_t rows, std::int64_t width) {
  const std::int64_t step = kVec ? kVecWidth : 1;
  for (std::int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const __nv_bfloat16* d = dh + r * width;
    const __nv_bfloat16* g = gate + r * ld;
    const __nv_bfloat16* u = up + r * ld;
    __nv_bfloat16* dg = dgate + r * ld;
    __nv_bfloat16* du = dup + r * ld;
    for (std::int64_t j = (blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x) * step; j < width;
         j += static_cast<std::int64_t>(gridDim.x) * blockDim.x * step) {
      if constexpr (kVec) {
        const Bf16x8 dv = load8(d + j), gv = load8(g + j), uv = load8(u + j);
        Bf16x8 dgv, duv;
        for (int e = 0; e < kVecWidth; ++e) swiglu_grads(dv.v[e], gv.v[e], uv.v[e], dgv.v[e], duv.v[e]);
        store8(du + j, duv);
        store8(dg + j, dgv);
      } else {
        __nv_bfloat16 dgs, dus;
        swiglu_grads(d[j], g[j], u[j], dgs, dus);
        du[j] = dus;
        dg[j] = dgs;
      }
    }
  }
}

// The launch over rows x columns, and whether 16-byte steps apply.
struct RowLaunch {
  dim3 grid;
  bool vec;
};
RowLaunch row_launch(std::int64_t rows, std::int64_t width, std::int64_t ld, std::initializer_list<const void*> ptrs) {
  bool vec = width % kVecWidth == 0 && ld % kVecWidth == 0;
  for (const void* p : ptrs) vec = vec && elementwise::aligned16(p);
  const std::int64_t per_row = vec ? width / kVecWidth : width;
  const std::int64_t x = std::min<std::int64_t>((per_row + kThreads - 1) / kThreads, 65535);
  // Enough blocks in all to fill the device several times over; rows beyond are grid-strided.
  const std::int64_t y = std::min<std::int64_t>(rows, std::max<std::int64_t>(1, 65535 / std::max<std::int64_t>(x, 1)));
  return {dim3(static_cast<unsigned>(std::max<std::int64_t>(x, 1)), static_cast<unsigned>(std::max<std::int64_t>(y, 1))),
          vec};
}

}  // namespace

void swiglu_forward(const std::uint16_t* gate, const std::uint16_t* up, std::int64_t ld, std::uint16_t* h,
                    std::int64_t rows, std::int64_t width, void* stream) {
  if (rows <= 0 || width <= 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  const auto* g = reinterpret_cast<const __nv_bfloat16*>(gate);
  const auto* u = reinterpret_cast<const __nv_bfloat16*>(up);
  auto* o = reinterpret_cast<__nv_bfloat16*>(h);
  const RowLaunch l = row_launch(rows, width, ld, {gate, up, h});
  if (l.vec) {
    swiglu_forward_kernel<true><<<l.grid, kThreads, 0, s>>>(g, u, ld, o, rows, width);
  } else {
    swiglu_forward_kernel<false><<<l.grid, kThreads, 0, s>>>(g, u, ld, o, rows, width);
  }
  check_last_launch("swiglu_forward_kernel");
}

void swiglu_backward(const std::uint16_t* dh, const std::uint16_t* gate, const std::uint16_t* up, std::int64_t ld,
                     std::uint16_t* dgate, std::uint16_t* dup, std::int64_t rows, std::int64_t width, void* stream) {
  if (rows <= 0 || width <= 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  const auto* d = reinterpret_cast<const __nv_bfloat16*>(dh);
  const auto* g = reinterpret_cast<const __nv_bfloat16*>(gate);
  const auto* u = reinterpret_cast<const __nv_bfloat16*>(up);
  auto* dg = reinterpret_cast<__nv_bfloat16*>(dgate);
  auto* du = reinterpret_cast<__nv_bfloat16*>(dup);
  const RowLaunch l = row_launch(rows, width, ld, {dh, gate, up, dgate, dup});
  if (l.vec) {
    swiglu_backward_kernel<true><<<l.grid, kThreads, 0, s>>>(d, g, u, ld, dg, du, rows, width);
  } else {
    swiglu_backward_kernel<false><<<l.grid, kThreads, 0, s>>>(d, g, u, ld, dg, du, rows, width);
  }
  check_last_launch("swiglu_backward_kernel");
}

}  // namespace odc::kernels::cuda
