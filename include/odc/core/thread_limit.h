#pragma once
// The most compute threads one process may ask for (train.threads, the tools' --threads): 4 x this
// machine's hardware threads (a little oversubscription can hide stalls; more only thrashes and
// multiplies per-thread buffers), and never more than kMaxComputeThreads.
#include <algorithm>
#include <cstdint>
#include <thread>

namespace odc {

inline constexpr std::int64_t kMaxComputeThreads = 1024;

inline std::int64_t max_compute_threads() {
  const auto hardware = static_cast<std::int64_t>(std::thread::hardware_concurrency());  // 0: unknown
  return hardware > 0 ? std::min(kMaxComputeThreads, 4 * hardware) : kMaxComputeThreads;
}

}  // namespace odc
