#pragma once
// The emulated attention tests' one check (test_attention.cpp, test_attention_key_segments.cpp):
// a case run under one of the emulator's three thread interleavings (chosen by its seed) against
// the float64 reference, within the bounds test_attention.cpp justifies (5e-3 normwise for out,
// dq, dk, dv: about twice the bf16 roundings' measured error; 1e-3 absolute for lse).
#include <cstdint>
#include <initializer_list>
#include <vector>

#include <catch2/catch.hpp>

#include "attention_harness.h"
#include "emu_block.h"

namespace odc_emu_test {

inline constexpr double kTol = 5e-3;
inline constexpr double kLseTol = 1e-3;

inline void check(const AttentionCase& c, std::uint32_t seed) {
  const auto order = static_cast<odc_emu::Schedule>(seed % 3);
  const odc_emu::UseSchedule use(order);
  const auto e = run_attention(c, seed);
  INFO("heads " << c.n_heads << "/" << c.n_kv_heads << " d " << c.head_dim << " schedule "
                << static_cast<int>(order) << ": " << e.describe());
  CHECK(e.out < kTol);
  CHECK(e.lse < kLseTol);
  CHECK(e.dq < kTol);
  CHECK(e.dk < kTol);
  CHECK(e.dv < kTol);
}

// Sequence lengths -> cumulative bounds (cu_seqlens).
inline std::vector<std::int32_t> bounds(std::initializer_list<int> lengths) {
  std::vector<std::int32_t> cu{0};
  for (int len : lengths) cu.push_back(cu.back() + len);
  return cu;
}

}  // namespace odc_emu_test
