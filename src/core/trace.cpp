#include "odc/core/trace.h"

#include <filesystem>
#include <fstream>

#include "odc/core/error.h"

namespace odc {

Tracer::Tracer(int rank) : rank_(rank), origin_(Clock::now()) {}

double Tracer::now_us() const { return std::chrono::duration<double, std::micro>(Clock::now() - origin_).count(); }

void Tracer::complete(std::string name, std::string_view category, double start_us, double end_us,
                      nlohmann::json args) {
  if (!args.is_object()) args = nlohmann::json::object();
  args["step"] = step_;
  if (microbatch_ >= 0 && !args.contains("microbatch")) args["microbatch"] = microbatch_;
  events_.push_back({{"ph", "X"},
                     {"name", std::move(name)},
                     {"cat", category},
                     {"ts", start_us},
                     {"dur", end_us - start_us},
                     {"pid", rank_},
                     {"tid", 0},
                     {"args", std::move(args)}});
}

nlohmann::json Tracer::events() const {
  nlohmann::json out = nlohmann::json::array();
  out.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", rank_}, {"args", {{"name", fmt::format("rank {}", rank_)}}}});
  out.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", rank_}, {"args", {{"sort_index", rank_}}}});
  out.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", rank_}, {"tid", 0}, {"args", {{"name", "compute"}}}});
  for (const auto& event : events_) out.push_back(event);
  return out;
}

TraceScope::TraceScope(Tracer* tracer, std::string_view category, std::string_view name, Args args)
    : tracer_(tracer) {
  if (tracer_ == nullptr) return;
  category_ = category;
  name_ = name;
  args_ = nlohmann::json::object();
  for (const auto& [key, value] : args) args_[std::string(key)] = value;
  start_us_ = tracer_->now_us();
}

TraceScope::~TraceScope() {
  if (tracer_ == nullptr) return;
  tracer_->complete(std::move(name_), category_, start_us_, tracer_->now_us(), std::move(args_));
}

void write_chrome_trace(const std::string& path, const nlohmann::json& events, const nlohmann::json& other) {
  const auto parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  std::ofstream out(path, std::ios::out | std::ios::trunc);
  if (!out) fail("train.trace_file: cannot open '{}' for writing", path);
  const nlohmann::json doc = {{"traceEvents", events}, {"displayTimeUnit", "ms"}, {"otherData", other}};
  out << doc.dump() << '\n';
  out.flush();
  if (!out) fail("train.trace_file: writing '{}' failed (disk full?)", path);
}

}  // namespace odc
