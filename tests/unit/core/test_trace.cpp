// Tracer: events carry the step/microbatch context, a null tracer records nothing, and the file
// is Chrome trace-event JSON.
#include <filesystem>
#include <fstream>
#include <thread>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "odc/core/error.h"
#include "odc/core/trace.h"

using namespace odc;

TEST_CASE("trace scopes record complete events with their context", "[core][trace]") {
  Tracer tracer(3);
  tracer.set_step(7);
  {
    const TraceScope outside(nullptr, "forward", "ignored");  // tracing off: nothing happens
  }
  tracer.set_microbatch(2);
  {
    const TraceScope scope(&tracer, "forward", "forward layer.0", {{"unit", 1}, {"tokens", 128}});
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  tracer.set_microbatch(-1);
  { const TraceScope scope(&tracer, "optimizer", "optimizer step"); }
  REQUIRE(tracer.size() == 2);
  const auto events = tracer.events();
  REQUIRE(events.size() == 5);  // 3 metadata events name the track
  REQUIRE(events[0]["ph"] == "M");
  REQUIRE(events[0]["args"]["name"] == "rank 3");
  const auto& fwd = events[3];
  REQUIRE(fwd["ph"] == "X");
  REQUIRE(fwd["pid"] == 3);
  REQUIRE(fwd["cat"] == "forward");
  REQUIRE(fwd["args"]["step"] == 7);
  REQUIRE(fwd["args"]["microbatch"] == 2);
  REQUIRE(fwd["args"]["tokens"] == 128.0);
  REQUIRE(fwd["dur"].get<double>() >= 2000.0);  // slept 2 ms; microseconds
  const auto& opt = events[4];
  REQUIRE_FALSE(opt["args"].contains("microbatch"));
  REQUIRE(opt["ts"].get<double>() >= fwd["ts"].get<double>() + fwd["dur"].get<double>());
}

TEST_CASE("chrome trace files parse back and bad paths are named", "[core][trace]") {
  const auto dir = std::filesystem::temp_directory_path() / "odc_trace_test";
  std::filesystem::remove_all(dir);
  Tracer tracer(0);
  { const TraceScope scope(&tracer, "barrier", "minibatch end"); }
  const auto path = (dir / "sub" / "trace.json").string();
  write_chrome_trace(path, tracer.events(), {{"world_size", 1}});
  std::ifstream in(path);
  const auto doc = nlohmann::json::parse(in);
  REQUIRE(doc["displayTimeUnit"] == "ms");
  REQUIRE(doc["otherData"]["world_size"] == 1);
  REQUIRE(doc["traceEvents"].size() == 4);
  std::filesystem::create_directories(dir / "a_directory");
  REQUIRE_THROWS_WITH(write_chrome_trace((dir / "a_directory").string(), tracer.events(), {}),
                      Catch::Contains("a_directory") && Catch::Contains("train.trace_file"));
}
