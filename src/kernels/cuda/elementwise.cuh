#pragma once
// Launch shape shared by the element-wise CUDA kernels, which loop over their elements with a
// grid stride (so the grid is capped and any n is covered).
#include <cstdint>

namespace odc::kernels::cuda::elementwise {

inline constexpr int kThreads = 256;

inline unsigned blocks_for(std::int64_t n) {
  const std::int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

}  // namespace odc::kernels::cuda::elementwise
