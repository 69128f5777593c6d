#include "odc/train/run/metrics.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "odc/core/error.h"

namespace odc::train {

MetricsWriter::MetricsWriter(const std::string& path, std::int64_t keep_through_step,
                             const std::vector<std::string>& unwritten)
    : path_(path) {
  if (path.empty()) return;
  const auto parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  std::string kept;
  std::int64_t kept_records = 0;
  if (keep_through_step > 0) {
    std::set<std::string> lines;
    std::ifstream old(path);
    std::string line;
    while (std::getline(old, line)) {
      const auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (record.is_object() && record.contains("step") && record["step"].is_number_integer() &&
          record["step"].get<std::int64_t>() <= keep_through_step) {
        kept += line;
        kept += '\n';
        ++kept_records;
        lines.insert(line);
      }
    }
    std::int64_t restored = 0;
    for (const auto& missing : unwritten) {
      if (lines.contains(missing)) continue;
      kept += missing;
      kept += '\n';
      ++restored;
    }
    spdlog::info("train.metrics_file '{}': resumed after step {}: kept {} earlier records{}, appending", path,
                 keep_through_step, kept_records,
                 restored > 0 ? fmt::format(" and wrote back {} that could not be written before (kept in the "
                                            "checkpoint)", restored)
                              : std::string());
  }
  out_.open(path, std::ios::out | std::ios::trunc);
  if (!out_) fail("train.metrics_file: cannot open '{}' for writing: {}", path, std::strerror(errno));
  errno = 0;
  out_ << kept;
  out_.flush();
  if (!out_) fail("train.metrics_file: writing '{}' failed: {}", path_, errno != 0 ? std::strerror(errno) : "I/O error");
}

void MetricsWriter::write(const nlohmann::json& record) {
  if (!out_.is_open()) return;
  // errno of the failed write(2) under the flush says why (ENOSPC: "No space left on device").
  errno = 0;
  const std::string line = record.dump();
  out_ << line << '\n';
  out_.flush();
  if (!out_) {
    const int error = errno;
    unwritten_.push_back(line);
    throw MetricsWriteError(fmt::format("train.metrics_file: writing '{}' failed: {}", path_,
                                        error != 0 ? std::strerror(error) : "I/O error"));
  }
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto total = static_cast<long long>(seconds + 0.5);
  if (total >= 3600) return fmt::format("{}h{:02}m", total / 3600, (total % 3600) / 60);
  if (total >= 60) return fmt::format("{}m{:02}s", total / 60, total % 60);
  return fmt::format("{}s", total);
}

}  // namespace odc::train
