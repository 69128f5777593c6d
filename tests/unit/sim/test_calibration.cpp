// Calibration from a trainer trace: the non-negative least-squares fit recovers known
// coefficients, clamps impossible negative ones, drops all-zero columns; a synthetic trace in
// odc-train's format yields the per-unit times it was generated from; bad traces are clear errors.
#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "odc/core/error.h"
#include "odc/sim/calibration.h"

using namespace odc::sim;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

// Known per-unit times: unit u forward = c0 + c1*T + c2*P with coefficients depending on u.
StepTime truth(const std::string& phase, int unit) {
  const double scale = phase == "backward" ? 2.0 : (phase == "head" ? 3.0 : 1.0);
  if (unit == 0 && phase != "head") return {scale * 2e-5, scale * 1e-8, 0.0, 0.0};  // embedding: no attention
  return {scale * 1e-4 * unit, scale * 3e-7, scale * 2e-11 * unit, 0.0};
}

json model_json() {
  return {{"vocab_size", 64},         {"hidden_size", 32},         {"intermediate_size", 64},
          {"num_hidden_layers", 2},   {"num_attention_heads", 4},  {"num_key_value_heads", 2},
          {"rms_norm_eps", 1e-5},     {"tie_word_embeddings", false}};
}

// A trace in odc-train's format: 2 ranks, 3 steps, microbatches of varied packings.
json synthetic_trace() {
  json events = json::array();
  for (int rank = 0; rank < 2; ++rank) {
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", rank}, {"args", {{"name", "rank"}}}});
  }
  // (tokens, pairs) of microbatches: same tokens with different packings separate c1 from c2.
  const std::vector<std::pair<double, double>> microbatches = {
      {512, 512.0 * 513 / 2}, {512, 2 * 256.0 * 257 / 2}, {1024, 1024.0 * 1025 / 2},
      {1024, 4 * 256.0 * 257 / 2}, {2048, 2048.0 * 2049 / 2}, {300, 300.0 * 301 / 2}};
  double clock = 0.0;
  auto add = [&](int rank, const std::string& category, const std::string& name, double seconds, json args) {
    events.push_back({{"ph", "X"}, {"cat", category}, {"name", name}, {"ts", clock * 1e6}, {"dur", seconds * 1e6},
                      {"pid", rank}, {"tid", 0}, {"args", std::move(args)}});
    clock += seconds;
  };
  std::size_t next = 0;
  for (int step = 0; step < 3; ++step) {
    for (int rank = 0; rank < 2; ++rank) {
      for (int m = 0; m < 2; ++m) {
        const auto [tokens, pairs] = microbatches[next++ % microbatches.size()];
        json mb_args = {{"step", step}, {"microbatch", m}, {"tokens", tokens}, {"pairs", pairs}};
        auto at = [&](const std::string& phase, int unit) {
          const auto t = truth(phase, unit);
          return t.c0 + t.c1 * tokens + t.c2 * pairs;
        };
        json unit_args = mb_args;
        for (int u = 0; u <= 2; ++u) {
          unit_args["unit"] = static_cast<double>(u);  // the trainer's tracer writes doubles
          add(rank, "wait", "gather wait layer", 1e-5, {{"unit", u}, {"step", step}});
          add(rank, "forward", "forward unit", at("forward", u), unit_args);
        }
        unit_args["unit"] = 3;
        add(rank, "head", "head", at("head", 3), unit_args);
        for (int u = 2; u >= 0; --u) {
          unit_args["unit"] = u;
          add(rank, "backward", "backward unit", at("backward", u), unit_args);
          add(rank, "wait", "push wait layer", 2e-5, {{"unit", u}, {"step", step}});
        }
      }
      add(rank, "barrier", "minibatch end", 1e-3, {{"step", step}});
      add(rank, "optimizer", "optimizer step", 0.004, {{"step", step}});
    }
  }
  return {{"traceEvents", events},
          {"displayTimeUnit", "ms"},
          {"otherData", {{"world_size", 2}, {"comm", "odc"}, {"balance", "lb_mini"}, {"threads", 1}, {"model", model_json()}}}};
}

void check_close(const StepTime& fitted, const StepTime& expected) {
  CHECK(fitted.c0 == Approx(expected.c0).margin(1e-12).epsilon(1e-6));
  CHECK(fitted.c1 == Approx(expected.c1).margin(1e-15).epsilon(1e-6));
  CHECK(fitted.c2 == Approx(expected.c2).margin(1e-18).epsilon(1e-6));
}

}  // namespace

TEST_CASE("fit_step_time recovers known non-negative coefficients", "[sim]") {
  std::vector<double> tokens, pairs, seconds;
  for (double t : {256.0, 1024.0, 4096.0, 16384.0}) {
    for (double sequences : {1.0, 4.0}) {
      const double s = t / sequences;
      tokens.push_back(t);
      pairs.push_back(sequences * s * (s + 1) / 2);
      seconds.push_back(1e-3 + 2e-6 * tokens.back() + 3e-10 * pairs.back());
    }
  }
  check_close(fit_step_time(tokens, pairs, seconds, "test"), {1e-3, 2e-6, 3e-10, 0.0});

  SECTION("a negative intercept is clamped to 0 and the rest refitted") {
    for (std::size_t i = 0; i < seconds.size(); ++i) seconds[i] = 5e-6 * tokens[i] - 1e-3;
    const auto fit = fit_step_time(tokens, pairs, seconds, "test");
    CHECK(fit.c0 == 0.0);
    CHECK(fit.c1 >= 0.0);
    CHECK(fit.c2 >= 0.0);
    // Still a close description of the data.
    CHECK(fit.c0 + fit.c1 * 16384 + fit.c2 * pairs[6] == Approx(seconds[6]).epsilon(0.05));
  }
  SECTION("an all-zero column (no attention) is dropped") {
    std::fill(pairs.begin(), pairs.end(), 0.0);
    for (std::size_t i = 0; i < seconds.size(); ++i) seconds[i] = 1e-4 + 1e-7 * tokens[i];
    check_close(fit_step_time(tokens, pairs, seconds, "test"), {1e-4, 1e-7, 0.0, 0.0});
  }
  SECTION("bad input") {
    CHECK_THROWS_WITH(fit_step_time({}, {}, {}, "unit x"), Contains("unit x") && Contains("no samples"));
    CHECK_THROWS_AS(fit_step_time({1.0}, {1.0, 2.0}, {1.0}, "unit x"), odc::Error);
  }
}

TEST_CASE("a synthetic odc-train trace calibrates every unit", "[sim]") {
  const auto calibration = calibrate_from_trace(synthetic_trace(), "synthetic.json");
  CHECK(calibration.model.num_hidden_layers == 2);
  CHECK(calibration.summary.world_size == 2);
  CHECK(calibration.summary.steps == 3);
  CHECK(calibration.summary.comm == "odc");
  REQUIRE(calibration.compute.forward.size() == 3);
  REQUIRE(calibration.compute.backward.size() == 3);
  for (int u = 0; u <= 2; ++u) {
    check_close(calibration.compute.forward[static_cast<std::size_t>(u)], truth("forward", u));
    check_close(calibration.compute.backward[static_cast<std::size_t>(u)], truth("backward", u));
  }
  check_close(calibration.compute.head, truth("head", 3));
  CHECK(calibration.compute.optimizer_s == Approx(0.004));
  CHECK(rescaled_optimizer(calibration, 8) == Approx(0.001));  // 2 ranks' shards over 8 devices
  CHECK(calibration.summary.gather_wait_s == Approx(2 * 3 * 1e-5));  // 2 microbatches x 3 units
  CHECK(calibration.summary.push_wait_s == Approx(2 * 3 * 2e-5));
  CHECK(calibration.summary.barrier_s == Approx(1e-3));
  CHECK(calibration.summary.minibatch_s > 0.0);
  CHECK(calibration.fit_notes.size() == 7);
}

TEST_CASE("calibration errors name the trace and the problem", "[sim]") {
  CHECK_THROWS_WITH(calibrate_from_trace(json::array(), "t.json"), Contains("t.json") && Contains("traceEvents"));
  auto trace = synthetic_trace();
  SECTION("no model") {
    trace["otherData"].erase("model");
    CHECK_THROWS_WITH(calibrate_from_trace(trace, "t.json"), Contains("model"));
  }
  SECTION("unit out of range") {
    trace["traceEvents"].push_back({{"ph", "X"}, {"cat", "forward"}, {"name", "forward x"}, {"ts", 0}, {"dur", 1},
                                    {"pid", 0}, {"args", {{"unit", 9}, {"tokens", 1}, {"pairs", 1}, {"step", 0}}}});
    CHECK_THROWS_WITH(calibrate_from_trace(trace, "t.json"), Contains("unit 9") && Contains("t.json"));
  }
  SECTION("missing units") {
    json events = json::array();
    for (const auto& e : trace["traceEvents"]) {
      if (e.value("cat", "") != "backward") events.push_back(e);
    }
    trace["traceEvents"] = events;
    CHECK_THROWS_WITH(calibrate_from_trace(trace, "t.json"), Contains("backward of unit 0") && Contains("no events"));
  }
  SECTION("no optimizer events") {
    json events = json::array();
    for (const auto& e : trace["traceEvents"]) {
      if (e.value("cat", "") != "optimizer") events.push_back(e);
    }
    trace["traceEvents"] = events;
    CHECK_THROWS_WITH(calibrate_from_trace(trace, "t.json"), Contains("optimizer"));
  }
  SECTION("a missing or malformed file") {
    CHECK_THROWS_WITH(calibrate_from_trace_file("/nonexistent/trace.json"), Contains("/nonexistent/trace.json"));
    const auto path = std::filesystem::temp_directory_path() / "odc_sim_bad_trace.json";
    std::ofstream(path) << "{not json";
    CHECK_THROWS_WITH(calibrate_from_trace_file(path.string()), Contains("not valid JSON"));
    std::filesystem::remove(path);
  }
}

TEST_CASE("a calibrated model only describes the traced shape", "[sim]") {
  const auto calibration = calibrate_from_trace(synthetic_trace(), "synthetic.json");
  auto other = calibration.model;
  CHECK_NOTHROW(check_same_shape(calibration.model, other, "synthetic.json"));
  other.hidden_size = 64;
  CHECK_THROWS_WITH(check_same_shape(calibration.model, other, "synthetic.json"),
                    Contains("hidden_size = 32") && Contains("64"));
}
