#pragma once
// Tracer: a per-rank timeline of what the compute thread did (forward/backward per unit,
// communication waits, barriers, optimizer), kept in memory and written as Chrome trace-event JSON
// (opens in Perfetto and chrome://tracing; one process track per rank).
//
// Components take a `Tracer*` that is null when tracing is off; TraceScope then costs one branch.
// The trainer sets the step and microbatch context, which every event carries in its args, so the
// simulator can fit per-unit costs from a trace. A Tracer is used by one thread only.
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace odc {

class Tracer {
 public:
  using Clock = std::chrono::steady_clock;
  explicit Tracer(int rank);

  // Timestamps are microseconds since the origin; ranks set it right after a barrier so their
  // tracks line up across machines (on one machine the clock is shared anyway).
  void set_origin(Clock::time_point origin) { origin_ = origin; }
  double now_us() const;

  void set_step(std::int64_t step) { step_ = step; }
  void set_microbatch(std::int64_t microbatch) { microbatch_ = microbatch; }  // -1: outside

  // A complete event ("ph": "X") from start_us to end_us; `args` gains "step" (and "microbatch"
  // inside one).
  void complete(std::string name, std::string_view category, double start_us, double end_us, nlohmann::json args);

  std::size_t size() const { return events_.size(); }
  int rank() const { return rank_; }
  // This rank's events (including its process-name metadata) as a JSON array.
  nlohmann::json events() const;

 private:
  int rank_;
  Clock::time_point origin_;
  std::int64_t step_ = 0;
  std::int64_t microbatch_ = -1;
  std::vector<nlohmann::json> events_;
};

// Records [construction, destruction) as one complete event when `tracer` is non-null.
class TraceScope {
 public:
  using Args = std::initializer_list<std::pair<std::string_view, double>>;
  TraceScope(Tracer* tracer, std::string_view category, std::string_view name, Args args = {});
  ~TraceScope();
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  Tracer* tracer_;
  std::string category_;
  std::string name_;
  nlohmann::json args_;
  double start_us_ = 0.0;
};

// Writes a Chrome trace-event file: {"traceEvents": [...], "displayTimeUnit": "ms",
// "otherData": other}. odc::Error naming the path when it cannot be written.
void write_chrome_trace(const std::string& path, const nlohmann::json& events, const nlohmann::json& other);

}  // namespace odc
