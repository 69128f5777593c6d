// bf16 / f16 casts: exact round trips over every 16-bit pattern, round-to-nearest-even at the
// halfway points, special values.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "odc/kernels/cast.h"

using namespace odc::kernels::cpu;

namespace {

std::uint16_t to_bf16(float x) {
  std::uint16_t out = 0;
  cast_f32_to_bf16(&x, &out, 1);
  return out;
}
float from_bf16(std::uint16_t x) {
  float out = 0;
  cast_bf16_to_f32(&x, &out, 1);
  return out;
}
std::uint16_t to_f16(float x) {
  std::uint16_t out = 0;
  cast_f32_to_f16(&x, &out, 1);
  return out;
}
float from_f16(std::uint16_t x) {
  float out = 0;
  cast_f16_to_f32(&x, &out, 1);
  return out;
}

}  // namespace

TEST_CASE("bf16 -> f32 -> bf16 is the identity on every non-NaN pattern", "[kernels][cast]") {
  std::vector<std::uint16_t> all(65536);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = std::uint16_t(i);
  std::vector<float> wide(all.size());
  std::vector<std::uint16_t> back(all.size());
  cast_bf16_to_f32(all.data(), wide.data(), std::int64_t(all.size()));
  cast_f32_to_bf16(wide.data(), back.data(), std::int64_t(all.size()));
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (std::isnan(wide[i])) {
      CHECK(std::isnan(from_bf16(back[i])));  // NaN stays NaN (quieted)
    } else if (back[i] != all[i]) {
      FAIL_CHECK("pattern " << i << " came back as " << back[i]);
    }
  }
  // bf16 is the top half of f32.
  CHECK(from_bf16(0x3F80) == 1.0f);
  CHECK(from_bf16(0xC000) == -2.0f);
}

TEST_CASE("f32 -> bf16 rounds to nearest, ties to even", "[kernels][cast]") {
  // bf16 has 7 fraction bits: around 1 the spacing is 2^-7.
  const float ulp = std::ldexp(1.0f, -7);
  CHECK(to_bf16(1.0f + ulp / 2) == 0x3F80);                          // tie, 1.0 is even: down
  CHECK(to_bf16(1.0f + 3 * ulp / 2) == 0x3F82);                      // tie, 1+ulp is odd: up
  CHECK(to_bf16(1.0f + ulp / 2 + std::ldexp(1.0f, -20)) == 0x3F81);  // just above the tie: up
  CHECK(to_bf16(1.0f + ulp / 2 - std::ldexp(1.0f, -20)) == 0x3F80);  // just below: down
  CHECK(to_bf16(-1.0f - ulp / 2) == 0xBF80);                         // symmetric for negatives
  CHECK(to_bf16(std::numeric_limits<float>::infinity()) == 0x7F80);
  CHECK(to_bf16(-0.0f) == 0x8000);
  // The largest finite float rounds up to infinity (its bf16 neighbours are 0x7F7F and inf).
  CHECK(to_bf16(std::numeric_limits<float>::max()) == 0x7F80);
  CHECK(std::isnan(from_bf16(to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST_CASE("f16 -> f32 -> f16 is the identity on every non-NaN pattern", "[kernels][cast]") {
  std::vector<std::uint16_t> all(65536);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = std::uint16_t(i);
  std::vector<float> wide(all.size());
  std::vector<std::uint16_t> back(all.size());
  cast_f16_to_f32(all.data(), wide.data(), std::int64_t(all.size()));
  cast_f32_to_f16(wide.data(), back.data(), std::int64_t(all.size()));
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (std::isnan(wide[i])) {
      CHECK(std::isnan(from_f16(back[i])));
    } else if (back[i] != all[i]) {
      FAIL_CHECK("pattern " << i << " came back as " << back[i]);
    }
  }
  CHECK(from_f16(0x3C00) == 1.0f);
  CHECK(from_f16(0x7BFF) == 65504.0f);               // largest finite half
  CHECK(from_f16(0x0001) == std::ldexp(1.0f, -24));  // smallest subnormal
  CHECK(from_f16(0x0400) == std::ldexp(1.0f, -14));  // smallest normal
}

TEST_CASE("f32 -> f16 rounds to nearest, ties to even, incl. subnormals and overflow",
          "[kernels][cast]") {
  const float ulp = std::ldexp(1.0f, -10);      // f16 spacing around 1 (10 fraction bits)
  CHECK(to_f16(1.0f + ulp / 2) == 0x3C00);      // tie to even: down
  CHECK(to_f16(1.0f + 3 * ulp / 2) == 0x3C02);  // tie to even: up
  CHECK(to_f16(1.0f + ulp / 2 + std::ldexp(1.0f, -20)) == 0x3C01);
  CHECK(to_f16(-(1.0f + 3 * ulp / 2)) == 0xBC02);
  // Subnormal spacing 2^-24: ties at half a unit go to even.
  const float sub = std::ldexp(1.0f, -24);
  CHECK(to_f16(sub / 2) == 0x0000);                          // 0.5 units: to 0 (even)
  CHECK(to_f16(3 * sub / 2) == 0x0002);                      // 1.5 units: to 2 (even)
  CHECK(to_f16(sub / 2 + std::ldexp(1.0f, -40)) == 0x0001);  // above the tie: up
  // Overflow: 65520 is the tie between 65504 (odd mantissa) and 65536 (inf): rounds to inf.
  CHECK(to_f16(65519.0f) == 0x7BFF);
  CHECK(to_f16(65520.0f) == 0x7C00);
  CHECK(to_f16(-1e10f) == 0xFC00);
  CHECK(to_f16(std::numeric_limits<float>::infinity()) == 0x7C00);
  CHECK(std::isnan(from_f16(to_f16(std::numeric_limits<float>::quiet_NaN()))));
  // Rounding that carries into the exponent: just below 2 rounds up to exactly 2.
  CHECK(to_f16(std::nextafter(2.0f, 0.0f)) == 0x4000);
}
