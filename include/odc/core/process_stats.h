#pragma once
// Resources this process holds right now, read from the kernel (Linux /proc): used by the
// per-step metrics and the long-run stability benchmark, which checks that none of them grows.
#include <cstdint>

namespace odc {

struct ProcessStats {
  std::int64_t rss_bytes = 0;         // resident set now (VmRSS)
  std::int64_t peak_rss_bytes = 0;    // high-water mark of the resident set (VmHWM)
  std::int64_t pinned_bytes = 0;      // pages pinned or locked for devices/registration (VmPin + VmLck)
  std::int64_t open_fds = 0;          // entries in /proc/self/fd
  std::int64_t threads = 0;           // Threads
};

// Reads /proc/self/status and /proc/self/fd. Fields that cannot be read stay 0.
ProcessStats read_process_stats();

}  // namespace odc
