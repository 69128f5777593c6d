#include "odc/core/process_stats.h"

#include <dirent.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
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

std::int64_t read_available_memory() {
  std::int64_t bytes = 0;
  if (std::FILE* info = std::fopen("/proc/meminfo", "r")) {
    char buffer[256];
    while (bytes <= 0 && std::fgets(buffer, sizeof buffer, info) != nullptr) {
      bytes = kilobytes_field(std::string_view(buffer, std::strlen(buffer)), "MemAvailable");
    }
    std::fclose(info);
  }
  return std::max<std::int64_t>(bytes, 0);
}

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

std::optional<ProcessStat> read_process_stat(long pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // "pid (name) STATE ppid ...": the name may hold spaces and parentheses, so split at the last ')'.
  const auto open = text.find('(');
  const auto close = text.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return std::nullopt;
  ProcessStat stat;
  stat.name = text.substr(open + 1, close - open - 1);
  std::istringstream fields(text.substr(close + 1));
  std::string state;
  if (!(fields >> state) || state.empty()) return std::nullopt;
  stat.state = state[0];
  if (!(fields >> stat.parent)) return std::nullopt;
  std::string field;
  for (int i = 5; i <= 22 && fields >> field; ++i) {}
  stat.start_time = field;
  return stat;
}

}  // namespace odc
