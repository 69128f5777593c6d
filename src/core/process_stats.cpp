#include "odc/core/process_stats.h"

#include <dirent.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace odc {

namespace {

// "VmRSS:	  123456 kB" -> bytes; other lines -> -1.
std::int64_t kilobytes_field(std::string_view line, std::string_view name) {
  if (line.substr(0, name.size()) != name || line.size() <= name.size() || line[name.size()] != ':') return -1;
  long long value = 0;
  if (std::sscanf(line.data() + name.size() + 1, "%lld", &value) != 1) return -1;
  return static_cast<std::int64_t>(value) * 1024;
}

}  // namespace

ProcessStats read_process_stats() {
  ProcessStats stats;
  if (std::FILE* status = std::fopen("/proc/self/status", "r")) {
    char buffer[256];
    while (std::fgets(buffer, sizeof buffer, status) != nullptr) {
      const std::string_view line(buffer, std::strlen(buffer));
      if (const auto v = kilobytes_field(line, "VmRSS"); v >= 0) stats.rss_bytes = v;
      if (const auto v = kilobytes_field(line, "VmHWM"); v >= 0) stats.peak_rss_bytes = v;
      if (const auto v = kilobytes_field(line, "VmPin"); v >= 0) stats.pinned_bytes += v;
      if (const auto v = kilobytes_field(line, "VmLck"); v >= 0) stats.pinned_bytes += v;
      if (line.substr(0, 8) == "Threads:") stats.threads = std::strtoll(buffer + 8, nullptr, 10);
    }
    std::fclose(status);
  }
  if (DIR* fds = opendir("/proc/self/fd")) {
    while (const dirent* entry = readdir(fds)) {
      if (entry->d_name[0] != '.') ++stats.open_fds;
    }
    closedir(fds);
    --stats.open_fds;  // the descriptor opendir itself holds
  }
  return stats;
}

}  // namespace odc
