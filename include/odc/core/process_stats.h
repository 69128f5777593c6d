#pragma once
// Resources this process holds right now, read from the kernel (Linux /proc): used by the
// per-step metrics and the long-run stability benchmark, which checks that none of them grows.
#include <cstdint>
#include <optional>
#include <string>

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

// The host memory a new allocation can get without swapping (MemAvailable of /proc/meminfo), in
// bytes; 0 when it cannot be read.
std::int64_t read_available_memory();

// What /proc/PID/stat says of another process: its name (comm, at most 15 bytes), its state
// letter ('Z' zombie, 'X' dead: exited all the same) and its start time since boot (field 22, as
// text; with the pid, it tells a process from a later one that reuses the pid).
struct ProcessStat {
  std::string name;
  char state = '?';
  long parent = 0;  // ppid
  std::string start_time;
  bool exited() const { return state == 'Z' || state == 'X'; }
};
// nullopt when there is no such process (or its stat cannot be read).
std::optional<ProcessStat> read_process_stat(long pid);

}  // namespace odc
