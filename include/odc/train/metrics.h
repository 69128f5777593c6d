#pragma once
// Per-step metrics as JSON lines (one object per optimizer step, flushed as written, so a crashed
// or interrupted run keeps every completed step).
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace odc::train {

class MetricsWriter {
 public:
  // Empty path = disabled. The file is truncated: a run's metrics file describes that run.
  explicit MetricsWriter(const std::string& path);
  void write(const nlohmann::json& record);
  bool enabled() const { return out_.is_open(); }

 private:
  std::ofstream out_;
  std::string path_;
};

// "1h02m", "3m07s", "12s" for progress lines.
std::string format_duration(double seconds);

}  // namespace odc::train
