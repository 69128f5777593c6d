#include "odc/train/config/output_pattern.h"

#include "odc/core/error.h"

namespace odc::train {

constexpr std::string_view kRankPlaceholder = "{rank}";

std::string rank_output_path(const std::string& pattern, int rank) {
  if (pattern.find(kRankPlaceholder) == std::string::npos) return rank == 0 ? pattern : std::string();
  std::string out;
  for (std::size_t at = 0;;) {
    const std::size_t next = pattern.find(kRankPlaceholder, at);
    out += pattern.substr(at, next == std::string::npos ? std::string::npos : next - at);
    if (next == std::string::npos) return out;
    out += std::to_string(rank);
    at = next + kRankPlaceholder.size();
  }
}

void check_output_pattern(std::string_view key, const std::string& pattern) {
  for (std::size_t at = pattern.find_first_of("{}"); at != std::string::npos; at = pattern.find_first_of("{}", at)) {
    if (pattern.compare(at, kRankPlaceholder.size(), kRankPlaceholder) == 0) {
      at += kRankPlaceholder.size();
      continue;
    }
    const std::size_t close = pattern[at] == '{' ? pattern.find('}', at) : std::string::npos;
    const std::string found = close == std::string::npos ? pattern.substr(at, 1) : pattern.substr(at, close - at + 1);
    fail("{} '{}': '{}' is not a placeholder: the one placeholder is {} (the rank's number; lower case), and no other "
         "brace may appear in the path", key, pattern, found, kRankPlaceholder);
  }
}

}  // namespace odc::train
