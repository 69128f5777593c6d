#pragma once
// The median of a benchmark's timings (the mean of the middle two for an even count).
#include <algorithm>
#include <cstddef>
#include <vector>

namespace odc::bench {

inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

}  // namespace odc::bench
