#pragma once
// Products of counts that come from the user (a batch times ranks, epochs times steps per epoch):
// a value near the top of int64 must be refused naming its keys, never wrap to a negative or zero
// count that trains nothing.
#include <cstdint>
#include <limits>
#include <optional>

namespace odc {

// a x b for a, b >= 0 where it fits an int64_t; nullopt where it would overflow.
inline std::optional<std::int64_t> product_within_int64(std::int64_t a, std::int64_t b) {
  std::int64_t product = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &product)) return std::nullopt;
  return product;
}

// The largest a with a x b within int64_t (b >= 1): the bound an error names.
inline std::int64_t largest_factor_within_int64(std::int64_t b) {
  return b <= 0 ? std::numeric_limits<std::int64_t>::max() : std::numeric_limits<std::int64_t>::max() / b;
}

}  // namespace odc
