#pragma once
// Private helper of the CPU kernels: spreading independent pieces of work over the compute
// threads (OpenMP; the count is kernels::cpu::set_num_threads, the same threads oneDNN's GEMMs
// use). Work is cut into fixed pieces that do not depend on the thread count, and every piece
// runs the same code it would run serially, so results are bitwise the same for any number of
// threads. One thread runs the pieces inline, with no OpenMP team.
#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace odc::kernels::cpu {

// f(begin, end) over [0, n) in pieces of `grain` elements (the last may be shorter). For SIMD
// loops, grain is a multiple of the vector width so only the final piece has a scalar tail.
template <typename F>
void parallel_chunks(std::int64_t n, std::int64_t grain, F&& f) {
  if (n <= 0) return;
  const std::int64_t pieces = (n + grain - 1) / grain;
  if (pieces == 1 || omp_get_max_threads() == 1 || omp_in_parallel()) {
    for (std::int64_t c = 0; c < pieces; ++c) f(c * grain, std::min(n, (c + 1) * grain));
    return;
  }
#pragma omp parallel for schedule(static)
  for (std::int64_t c = 0; c < pieces; ++c) f(c * grain, std::min(n, (c + 1) * grain));
}

}  // namespace odc::kernels::cpu
