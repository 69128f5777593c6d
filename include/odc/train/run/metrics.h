#pragma once
// Per-step metrics as JSON lines (one object per optimizer step, flushed as written, so a crashed
// or interrupted run keeps every completed step).
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "odc/core/error.h"

namespace odc::train {

// A metrics line could not be written (disk full, I/O error): the trainer catches it to save a
// checkpoint on every rank before the run ends with this message (trainer.cpp).
class MetricsWriteError : public Error {
 public:
  explicit MetricsWriteError(const std::string& message) : Error(message) {}
};

class MetricsWriter {
 public:
  // Empty path = disabled. A new run (keep_through_step = 0) truncates the file: a run's metrics
  // file describes that run. A resumed run keeps the records of steps <= keep_through_step (the
  // steps its checkpoint holds; later ones belong to an abandoned continuation, torn lines to a
  // crash), then writes back `unwritten`, the lines this rank could not write before that
  // checkpoint was saved (TrainingManifest::unwritten_metrics; those already there verbatim are
  // not repeated), and appends after them.
  explicit MetricsWriter(const std::string& path, std::int64_t keep_through_step = 0,
                         const std::vector<std::string>& unwritten = {});
  // Throws MetricsWriteError naming the file and the system's reason when the line does not
  // reach the file (each line is flushed); the line is then kept in unwritten(), as is every later
  // one (the stream stays failed), so that a checkpoint can carry them.
  void write(const nlohmann::json& record);
  bool enabled() const { return out_.is_open(); }
  const std::vector<std::string>& unwritten() const { return unwritten_; }

 private:
  std::ofstream out_;
  std::string path_;
  std::vector<std::string> unwritten_;
};

// "1h02m", "3m07s", "12s" for progress lines.
std::string format_duration(double seconds);

}  // namespace odc::train
