#pragma once
// Launch shape and 16-byte access shared by the element-wise CUDA kernels, which loop over their
// elements with a grid stride (so the grid is capped and any n is covered).
//
// Vectorised access: a kernel instantiated with kVec = true moves 8 elements per iteration as
// 16-byte loads and stores (one uint4 of bf16, two float4 of fp32), then finishes the n % 8 tail
// element by element; the host picks it when every pointer is 16-byte aligned (aligned16), else
// the element-by-element instantiation. Each element's arithmetic is the same either way, so the
// two give the same bits (tests/emu/test_kernels.cpp).
#include <cstdint>
#include <cstring>

namespace odc::kernels::cuda::elementwise {

inline constexpr int kThreads = 256;
inline constexpr int kVecWidth = 8;

inline unsigned blocks_for(std::int64_t n) {
  const std::int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

inline bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

// Blocks for a kernel that covers n elements as n / 8 vector steps (kVec) or one by one.
inline unsigned blocks_for(std::int64_t n, bool vec) { return blocks_for(vec ? (n + kVecWidth - 1) / kVecWidth : n); }

// The grid-stride index and stride of this thread.
__device__ __forceinline__ std::int64_t first_index() {
  return blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
}
__device__ __forceinline__ std::int64_t grid_stride() { return static_cast<std::int64_t>(gridDim.x) * blockDim.x; }

template <typename T>
struct Pack8 {
  T v[kVecWidth];
};

// 8 consecutive elements at p (16-byte aligned) in 16-byte accesses.
template <typename T>
__device__ __forceinline__ Pack8<T> load8(const T* p) {
  static_assert(sizeof(T) == 2 || sizeof(T) == 4, "bf16 or fp32 elements");
  Pack8<T> out;
  constexpr int kChunks = sizeof(T) * kVecWidth / 16;
  uint4 raw[kChunks];
  for (int c = 0; c < kChunks; ++c) raw[c] = reinterpret_cast<const uint4*>(p)[c];
  std::memcpy(&out, raw, sizeof(out));
  return out;
}

template <typename T>
__device__ __forceinline__ void store8(T* p, const Pack8<T>& in) {
  constexpr int kChunks = sizeof(T) * kVecWidth / 16;
  uint4 raw[kChunks];
  std::memcpy(raw, &in, sizeof(in));
  for (int c = 0; c < kChunks; ++c) reinterpret_cast<uint4*>(p)[c] = raw[c];
}

// Runs op(i) for every i in [0, n): 8 at a time through op8(i0) when kVec, then the tail one by one.
template <bool kVec, typename Op8, typename Op>
__device__ __forceinline__ void for_each(std::int64_t n, Op8&& op8, Op&& op) {
  std::int64_t begin = 0;
  if constexpr (kVec) {
    const std::int64_t packs = n / kVecWidth;
    for (std::int64_t p = first_index(); p < packs; p += grid_stride()) op8(p * kVecWidth);
    begin = packs * kVecWidth;
  }
  for (std::int64_t i = begin + first_index(); i < n; i += grid_stride()) op(i);
}

}  // namespace odc::kernels::cuda::elementwise
