// RunReport and export_hf over an in-process group of ranks: the trace gathers every rank's
// timeline into one file, per-rank metrics files, and the exported model holds every rank's shard
// of every unit in place.
#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "odc/io/hf_checkpoint.h"
#include "odc/model/units.h"
#include "odc/train/config/config_schema.h"
#include "odc/train/run/metrics.h"
#include "odc/train/checkpoint/model_export.h"
#include "odc/train/run/run_report.h"
#include "odc/train/config/run_settings.h"
#include "unit/rank_threads.h"
#include "unit/temp_dir.h"
#include "unit/tiny_model.h"

using namespace odc;

namespace {
Config report_config(const std::vector<std::string>& assignments) {
  Config config(train::trainer_tunables());
  for (const auto& a : assignments) config.apply_assignment(a);
  return config;
}

}  // namespace

TEST_CASE("run report: one trace with a track per rank, one metrics file per rank", "[train]") {
  const test::TempDir dir("run_report");
  const auto config = report_config({"train.trace_file=" + dir.file("trace.json"),
                                     "train.metrics_file=" + dir.file("m-{rank}.jsonl")});
  const auto errors = test::on_every_rank(3, [&](distributed::HostGroup& group) {
    train::RunReport report(train::resolve_run_settings(config, false).train, group, 1e9);
    report.begin_run(0, 2, 2);
    Tracer tracer(group.rank());
    for (std::int64_t step = 0; step < 2; ++step) {
      { const TraceScope scope(&tracer, "forward", "forward layer"); }
      train::StepResult r;
      r.step = step;
      r.loss = 2.0 - 0.5 * static_cast<double>(step);
      r.tokens = 100;
      r.sequences = 12;  // 4 per rank
      r.seconds = 0.5;
      r.local_tokens = 30 + group.rank();
      report.record(r, {0, 1024, {}});
    }
    report.summary(1024.0);
    report.write_trace(tracer, {{"world_size", group.size()}});
  });
  for (const auto& e : errors) REQUIRE(e.empty());
  nlohmann::json trace;
  std::ifstream(dir.file("trace.json")) >> trace;
  CHECK(trace["otherData"]["world_size"] == 3);
  std::vector<int> forward_events(3, 0);
  for (const auto& event : trace["traceEvents"]) {
    if (event["ph"] == "X" && event["name"] == "forward layer") ++forward_events[event["pid"].get<std::size_t>()];
  }
  CHECK(forward_events == std::vector<int>{2, 2, 2});
  for (int r = 0; r < 3; ++r) {
    std::ifstream in(dir.file("m-" + std::to_string(r) + ".jsonl"));
    std::string line;
    std::vector<nlohmann::json> lines;
    while (std::getline(in, line)) lines.push_back(nlohmann::json::parse(line));
    REQUIRE(lines.size() == 2);
    CHECK(lines[1]["step"] == 2);
    CHECK(lines[1]["loss"] == 1.5);
    CHECK(lines[1]["rank"] == r);
    CHECK(lines[1]["world_size"] == 3);
    CHECK(lines[1]["tokens_per_s"] == 200.0);
    CHECK(lines[1]["sequences"] == 12);
    CHECK(lines[1]["samples_per_s_per_rank"] == 8.0);  // 12 sequences / 3 ranks / 0.5 s
  }
}

// train.trace_file=tr-{rank}.json once wrote a file literally named "tr-{rank}.json" while the
// metrics file expanded the placeholder: rank 0 writes the one trace, so it is tr-0.json.
TEST_CASE("run report: the trace file expands {rank} like the metrics file", "[train]") {
  const test::TempDir dir("run_report_trace_rank");
  CHECK(train::rank_output_path("tr-{rank}.json", 0) == "tr-0.json");
  CHECK(train::rank_output_path("tr-{rank}.json", 2) == "tr-2.json");
  CHECK(train::rank_output_path("tr.json", 0) == "tr.json");
  CHECK(train::rank_output_path("tr.json", 1).empty());
  const auto config = report_config({"train.trace_file=" + dir.file("tr-{rank}.json")});
  const auto errors = test::on_every_rank(2, [&](distributed::HostGroup& group) {
    train::RunReport report(train::resolve_run_settings(config, false).train, group, 1e9);
    Tracer tracer(group.rank());
    { const TraceScope scope(&tracer, "forward", "forward layer"); }
    report.write_trace(tracer, {{"world_size", group.size()}});
  });
  for (const auto& e : errors) REQUIRE(e.empty());
  CHECK_FALSE(std::filesystem::exists(dir.file("tr-{rank}.json")));
  CHECK_FALSE(std::filesystem::exists(dir.file("tr-1.json")));
  nlohmann::json trace;
  std::ifstream(dir.file("tr-0.json")) >> trace;
  CHECK(trace["otherData"]["world_size"] == 2);
}

// A resumed run once truncated its metrics file: the steps before the checkpoint were lost.
TEST_CASE("metrics: a new run truncates the file, a resumed one keeps the steps its checkpoint holds", "[train]") {
  const test::TempDir dir("metrics_resume");
  const std::string path = dir.file("m.jsonl");
  auto lines_of = [&] {
    std::ifstream in(path);
    std::vector<std::int64_t> steps;
    std::string line;
    while (std::getline(in, line)) steps.push_back(nlohmann::json::parse(line)["step"].get<std::int64_t>());
    return steps;
  };
  {
    train::MetricsWriter writer(path);
    for (int step = 1; step <= 5; ++step) writer.write({{"step", step}, {"loss", 1.0 / step}});
  }
  { std::ofstream(path, std::ios::app) << "{\"step\": 6, \"lo"; }  // a line torn by a crash
  {
    // Resumed from the checkpoint of step 3: steps 4-5 belong to the abandoned continuation.
    train::MetricsWriter writer(path, 3);
    writer.write({{"step", 4}, {"loss", 0.3}});
  }
  CHECK(lines_of() == std::vector<std::int64_t>{1, 2, 3, 4});
  {
    train::MetricsWriter writer(path);  // a new run
    writer.write({{"step", 1}, {"loss", 2.0}});
  }
  CHECK(lines_of() == std::vector<std::int64_t>{1});
}

// A full disk at step 3 once lost step 3's line for good, though the checkpoint saved then holds
// step 3: the lines not written are kept (for that checkpoint) and written back on resume.
TEST_CASE("metrics: lines a full disk refused are kept, and a resume writes them back once", "[train]") {
  const test::TempDir dir("metrics_unwritten");
  const std::string path = dir.file("m.jsonl");
  std::vector<std::string> unwritten;
  {
    train::MetricsWriter full("/dev/full");  // every write fails with ENOSPC
    CHECK_THROWS_WITH(full.write({{"step", 3}, {"loss", 0.5}}),
                      "train.metrics_file: writing '/dev/full' failed: No space left on device");
    CHECK_THROWS_AS(full.write({{"step", 3}, {"eval_loss", 0.75}}), train::MetricsWriteError);
    unwritten = full.unwritten();
  }
  CHECK(unwritten == std::vector<std::string>{R"({"loss":0.5,"step":3})", R"({"eval_loss":0.75,"step":3})"});
  {
    train::MetricsWriter writer(path);
    writer.write({{"step", 1}, {"loss", 1.0}});
    writer.write({{"step", 2}, {"loss", 0.75}});
  }
  const auto read = [&] {
    std::ifstream in(path);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  };
  {
    train::MetricsWriter resumed(path, 3, unwritten);
    CHECK(resumed.unwritten().empty());
    resumed.write({{"step", 4}, {"loss", 0.25}});
  }
  const std::vector<std::string> expected = {R"({"loss":1.0,"step":1})", R"({"loss":0.75,"step":2})",
                                             R"({"loss":0.5,"step":3})", R"({"eval_loss":0.75,"step":3})",
                                             R"({"loss":0.25,"step":4})"};
  CHECK(read() == expected);
  // Resumed again from the same checkpoint: the lines already there are not repeated, step 4 goes.
  { train::MetricsWriter again(path, 3, unwritten); }
  CHECK(read() == std::vector<std::string>(expected.begin(), expected.end() - 1));
}

// {rank} is the one placeholder: "tr-{Rank}.json" was written under that very name.
TEST_CASE("run report: output paths expand every {rank}, and any other brace is refused", "[train]") {
  CHECK(train::rank_output_path("m-{rank}/r{rank}.jsonl", 3) == "m-3/r3.jsonl");
  CHECK_NOTHROW(train::check_output_pattern("train.metrics_file", "m-{rank}/r{rank}.jsonl"));
  CHECK_NOTHROW(train::check_output_pattern("train.trace_file", ""));
  CHECK_THROWS_WITH(train::check_output_pattern("train.trace_file", "tr-{Rank}.json"),
                    "train.trace_file 'tr-{Rank}.json': '{Rank}' is not a placeholder: the one placeholder is {rank} "
                    "(the rank's number; lower case), and no other brace may appear in the path");
  CHECK_THROWS_WITH(train::check_output_pattern("train.metrics_file", "m-{rank}-{host}.jsonl"),
                    Catch::Contains("'{host}' is not a placeholder"));
  CHECK_THROWS_WITH(train::check_output_pattern("train.metrics_file", "m-{rank.jsonl"),
                    Catch::Contains("'{' is not a placeholder"));
  CHECK_THROWS_WITH(train::check_output_pattern("train.metrics_file", "m-rank}.jsonl"),
                    Catch::Contains("'}' is not a placeholder"));
  // Read with the settings: before anything runs.
  CHECK_THROWS_WITH(train::resolve_run_settings(report_config({"train.trace_file=tr-{Rank}.json"}), false),
                    Catch::StartsWith("train.trace_file 'tr-{Rank}.json': '{Rank}' is not a placeholder"));
}

TEST_CASE("export_hf: the export holds every rank's shard of every unit in place", "[train]") {
  const test::TempDir dir("export_hf");
  const auto model_config = test::tiny_model();
  const auto units = model::build_unit_layouts(model_config);
  const auto config = report_config({"checkpoint.export_hf=" + dir.file("hf"), "checkpoint.export_dtype=float32"});
  const auto errors = test::on_every_rank(2, [&](distributed::HostGroup& group) {
    const distributed::ShardLayout layout(units, 2, group.rank());
    const distributed::ShardStore store(layout, units, model_config, 3);
    train::export_hf(config, group, store, model_config, {});
  });
  for (const auto& e : errors) REQUIRE(e.empty());
  // The same seed on one rank is the whole model: the export must equal it element for element.
  const io::HfCheckpoint exported(dir.file("hf"));
  CHECK(exported.architecture() == "LlamaForCausalLM");
  const distributed::ShardLayout whole(units, 1, 0);
  const distributed::ShardStore reference(whole, units, model_config, 3);
  for (int u = 0; u < whole.num_units(); ++u) {
    std::vector<float> read(static_cast<std::size_t>(units[static_cast<std::size_t>(u)].numel));
    exported.read_unit_range(u, 0, static_cast<std::int64_t>(read.size()), read.data());
    for (std::size_t i = 0; i < read.size(); ++i) REQUIRE(read[i] == reference.master(u)[i]);
  }
}
