#include "odc/train/metrics.h"

#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#include "odc/core/error.h"

namespace odc::train {

MetricsWriter::MetricsWriter(const std::string& path) : path_(path) {
  if (path.empty()) return;
  const auto parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  out_.open(path, std::ios::out | std::ios::trunc);
  if (!out_) fail("train.metrics_file: cannot open '{}' for writing", path);
}

void MetricsWriter::write(const nlohmann::json& record) {
  if (!out_.is_open()) return;
  out_ << record.dump() << '\n';
  out_.flush();
  if (!out_) fail("train.metrics_file: writing '{}' failed (disk full?)", path_);
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto total = static_cast<long long>(seconds + 0.5);
  if (total >= 3600) return fmt::format("{}h{:02}m", total / 3600, (total % 3600) / 60);
  if (total >= 60) return fmt::format("{}m{:02}s", total / 60, total % 60);
  return fmt::format("{}s", total);
}

}  // namespace odc::train
