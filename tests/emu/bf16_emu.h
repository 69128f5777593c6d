#pragma once
// __nv_bfloat16 on the CPU: the upper 16 bits of an IEEE binary32. float -> bf16 rounds to
// nearest, ties to even (as __float2bfloat16_rn); NaN stays NaN (canonical 0x7fff, as the
// device returns); bf16 -> float is exact.
#include <cstdint>
#include <cstring>

#include "cuda_emu.h"

struct alignas(2) __nv_bfloat16 {
  std::uint16_t __x;
};
struct alignas(4) __nv_bfloat162 {
  __nv_bfloat16 x, y;
};

inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {0x7fff};
  u += 0x7fffu + ((u >> 16) & 1u);
  return {static_cast<std::uint16_t>(u >> 16)};
}
inline float __bfloat162float(__nv_bfloat16 b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b.__x) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi) {
  return {__float2bfloat16_rn(lo), __float2bfloat16_rn(hi)};
}
inline float2 __bfloat1622float2(__nv_bfloat162 v) {
  return {__bfloat162float(v.x), __bfloat162float(v.y)};
}
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
