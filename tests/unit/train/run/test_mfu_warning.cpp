// An MFU above 100% is never printed without a warning that the peak was underestimated and how
// to fix it (train.peak_flops), given once per run by rank 0.
#include <string>

#include <catch2/catch.hpp>

#include "odc/train/config/config_schema.h"
#include "odc/train/run/run_report.h"
#include "odc/train/config/run_settings.h"
#include "unit/log_capture.h"
#include "unit/rank_threads.h"

using namespace odc;

namespace {

Config report_config(const std::vector<std::string>& assignments) {
  Config config(train::trainer_tunables());
  for (const auto& a : assignments) config.apply_assignment(a);
  return config;
}

// Two progress lines and the summary of a run whose per-step MFU is `mfu`, over 2 in-process
// ranks; returns what was logged.
std::string log_of_run(const Config& config, double peak_flops, double mfu) {
  const test::LogCapture log;
  const auto errors = test::on_every_rank(2, [&](distributed::HostGroup& group) {
    train::RunReport report(train::resolve_run_settings(config, false).train, group, peak_flops);
    report.begin_run(0, 2, 2);
    for (std::int64_t step = 0; step < 2; ++step) {
      train::StepResult r;
      r.step = step;
      r.loss = 1.0;
      r.tokens = 100;
      r.sequences = 4;
      r.seconds = 0.5;
      r.local_tokens = 50;
      r.mfu = mfu;
      // Above 100%: FLOPs that make the summary's MFU (over the test's tiny wall time) above it too;
      // else none, so that the summary stays below.
      r.flops = mfu > 1.0 ? mfu * peak_flops * r.seconds : 0.0;
      report.record(r, {0, 1024, {}});
      report.progress(r);
    }
    report.summary(1024.0);
  });
  for (const auto& e : errors) REQUIRE(e.empty());
  return log.text();
}

int count(const std::string& text, const std::string& fragment) {
  int n = 0;
  for (auto at = text.find(fragment); at != std::string::npos; at = text.find(fragment, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("mfu_above_peak_warning: only above 100%, naming the peak and the fix", "[train][peak]") {
  CHECK(train::mfu_above_peak_warning(0.25, 62e9, false).empty());
  CHECK(train::mfu_above_peak_warning(1.0, 62e9, false).empty());
  const std::string measured = train::mfu_above_peak_warning(1.122, 62e9, false);
  CHECK(measured.find("MFU 112.2% is above 100%: the measured peak of 62.0 GFLOP/s per rank was underestimated") !=
        std::string::npos);
  CHECK(measured.find("set train.peak_flops to the device's peak FLOP/s per rank") != std::string::npos);
  const std::string configured = train::mfu_above_peak_warning(1.5, 1e10, true);
  CHECK(configured.find("MFU 150.0% is above 100%: train.peak_flops = 1e+10 FLOP/s per rank is below what this run "
                        "achieves") != std::string::npos);
}

TEST_CASE("run report: an MFU above 100% warns once, on rank 0, below it nothing", "[train][peak]") {
  const std::string above = log_of_run(report_config({}), 1e9, 1.2);
  CHECK(count(above, "[warning] MFU ") == 1);  // two progress lines and the summary above 100%: once
  CHECK(count(above, "is above 100%: the measured peak of 1.0 GFLOP/s per rank was underestimated") == 1);
  REQUIRE(above.find("done: ") != std::string::npos);
  // Given with the progress line (the in-process ranks' lines interleave), before the summary.
  CHECK(above.find("[warning] MFU") < above.find("done: "));

  const std::string configured = log_of_run(report_config({"train.peak_flops=1e9"}), 1e9, 1.2);
  CHECK(count(configured, "[warning] MFU ") == 1);
  CHECK(count(configured, "train.peak_flops = 1e+09 FLOP/s per rank is below what this run achieves") == 1);

  const std::string below = log_of_run(report_config({}), 1e15, 0.3);
  CHECK(count(below, "[warning]") == 0);
}
