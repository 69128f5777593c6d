// Evaluation during training (train/run/evaluation.h): the trainer's eval loss equals the offline
// evaluator's (odc-eval's train::evaluate) on the same weights and data, the eval metrics lines,
// the best-checkpoint record (best.json, kept by checkpoint.keep's pruning, continued on resume,
// checkpoint.save_best), and the config errors, raised before any training.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "odc/data/dataset.h"
#include "odc/io/native_checkpoint.h"
#include "odc/train/config/config_schema.h"
#include "odc/train/rollout/inference.h"
#include "odc/train/run/trainer.h"
#include "unit/synthetic_data.h"
#include "unit/temp_dir.h"

using namespace odc;
namespace fs = std::filesystem;

namespace {

// `count` sequences of 3..40 tokens; only the second half of each is a target (as a chat's
// assistant turn would be), so the eval must honour the loss mask.
std::string write_tokens(const test::TempDir& dir, const std::string& name, int count, std::uint32_t seed) {
  const auto length = [seed](int s, test::Lcg&) { return 3 + (s * 11 + static_cast<int>(seed)) % 38; };
  return dir.write(name, test::synthetic_jsonl({count, seed, length}));
}

Config eval_config(const test::TempDir& dir, const std::vector<std::string>& extra, bool with_eval = true) {
  Config config(train::trainer_tunables());
  config.apply_assignment("data.train=" + write_tokens(dir, "train.jsonl", 24, 99));
  if (with_eval) config.apply_assignment("data.eval=" + write_tokens(dir, "eval.jsonl", 13, 7));
  config.apply_assignment(test::tiny_trainer_model());
  config.apply_assignment("data.minibatch_size=6");
  config.apply_assignment("data.max_tokens_per_microbatch=64");
  config.apply_assignment("train.steps=3");
  config.apply_assignment("train.warmup_steps=0");
  config.apply_assignment("train.lr=0.01");
  config.apply_assignment("train.log_level=warn");
  config.apply_assignment("train.peak_flops=1e10");  // skip the start-up sgemm in tests
  for (const auto& e : extra) config.apply_assignment(e);
  config.validate();
  return config;
}

std::vector<nlohmann::json> eval_lines(const std::string& metrics) {
  std::vector<nlohmann::json> out;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    auto json = nlohmann::json::parse(line);
    if (json.contains("eval_loss")) out.push_back(json);
  }
  return out;
}

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

}  // namespace

TEST_CASE("the trainer's eval loss on one rank equals odc-eval's on the same weights and data", "[train][eval]") {
  const test::TempDir dir("eval_parity");
  for (const std::string limit : {"0", "5"}) {
    const auto out = dir.file("export-" + limit);
    const Config config = eval_config(dir, {"checkpoint.export_hf=" + out, "data.eval_max_sequences=" + limit});
    train::Trainer trainer(config);
    trainer.run(false);
    REQUIRE(trainer.last_eval().has_value());
    const train::EvalSummary eval = *trainer.last_eval();
    CHECK(eval.step == 3);

    // odc-eval's path: the exported weights, the whole dataset in one batch of up to 4096 tokens.
    train::LoadedModel model(out, 1);
    const auto dataset = data::open_dataset(config.get_string("data.eval"), "tokens", 50);
    const train::EvalResult reference = train::evaluate(model, *dataset, 4096, std::stoll(limit));
    // The same targets (the loss mask's second halves) are scored ...
    CHECK(eval.tokens == reference.tokens);
    CHECK(eval.sequences == reference.sequences);
    // ... with the same nll: the trainer packs 64-token microbatches, odc-eval one batch, so the
    // GEMMs run over other row counts (fp32 sums in another order): 1e-5 relative.
    CHECK(eval.loss == Approx(reference.loss).epsilon(1e-5));
    CHECK(eval.perplexity == Approx(reference.perplexity).epsilon(1e-5));
    CHECK(eval.perplexity == Approx(std::exp(eval.loss)).epsilon(1e-12));
  }
}

TEST_CASE("evaluating during a run changes none of its losses or weights", "[train][eval]") {
  const test::TempDir dir("eval_neutral");
  auto run = [&](bool with_eval) {
    train::Trainer trainer(eval_config(dir, {"train.eval_every=1"}, with_eval));
    std::vector<double> losses;
    for (const auto& r : trainer.run()) losses.push_back(r.loss);
    std::vector<float> weights;
    for (int u = 0; u < trainer.store().layout().num_units(); ++u) {
      weights.insert(weights.end(), trainer.store().master(u), trainer.store().master(u) + trainer.store().shard_size(u));
    }
    return std::make_pair(losses, weights);
  };
  const auto with = run(true);
  const auto without = run(false);
  CHECK(with.first == without.first);    // bit for bit
  CHECK(with.second == without.second);
}

TEST_CASE("eval metrics lines, and best.json names the checkpoint with the lowest eval loss", "[train][eval]") {
  const test::TempDir dir("eval_best");
  const auto metrics = dir.file("metrics.jsonl");
  const auto ckpt = dir.file("ckpt");
  const Config config = eval_config(dir, {"train.steps=6", "train.eval_every=1", "train.metrics_file=" + metrics,
                                          "checkpoint.dir=" + ckpt, "checkpoint.every=2", "checkpoint.keep=1"});
  {
    train::Trainer trainer(config);
    trainer.run(false);
  }
  const auto lines = eval_lines(metrics);
  REQUIRE(lines.size() == 6);  // after every step; the end (step 6) is not evaluated twice
  std::map<std::int64_t, double> loss;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    CHECK(lines[i]["step"].get<std::int64_t>() == static_cast<std::int64_t>(i) + 1);
    CHECK(lines[i]["eval_perplexity"].get<double>() == Approx(std::exp(lines[i]["eval_loss"].get<double>())));
    CHECK(lines[i]["eval_tokens"].get<double>() > 0);
    loss[lines[i]["step"].get<std::int64_t>()] = lines[i]["eval_loss"].get<double>();
  }
  // Only checkpointed steps (2, 4, 6) are candidates without checkpoint.save_best.
  std::int64_t expected = 2;
  for (const std::int64_t s : {4, 6}) {
    if (loss[s] < loss[expected]) expected = s;
  }
  const auto best = read_json(fs::path(ckpt) / "best.json");
  CHECK(best["step"].get<std::int64_t>() == expected);
  CHECK(best["eval_loss"].get<double>() == loss[expected]);
  CHECK(best["checkpoint"].get<std::string>() == io::checkpoint_name(expected));
  CHECK(fs::exists(fs::path(ckpt) / io::checkpoint_name(expected) / "manifest.json"));
  std::vector<std::int64_t> kept;
  for (const auto& e : io::list_checkpoints(ckpt)) kept.push_back(e.step);
  // checkpoint.keep 1: the newest, and the best when it is another.
  CHECK(kept == (expected == 6 ? std::vector<std::int64_t>{6} : std::vector<std::int64_t>{expected, 6}));

  SECTION("pruning keeps the best; a resumed run continues the record") {
    // Make step 6 a best no later eval can beat, then resume to step 10 with checkpoint.keep 1.
    auto record = best;
    record["step"] = 6;
    record["checkpoint"] = io::checkpoint_name(6);
    record["eval_loss"] = -1.0;
    std::ofstream(fs::path(ckpt) / "best.json") << record.dump();
    const Config longer = eval_config(dir, {"train.steps=10", "train.eval_every=1", "train.metrics_file=" + metrics,
                                            "checkpoint.dir=" + ckpt, "checkpoint.every=2", "checkpoint.keep=1"});
    {
      train::Trainer trainer(longer);
      REQUIRE(trainer.steps_done() == 6);
      trainer.run(false);
    }
    std::vector<std::int64_t> steps;
    for (const auto& e : io::list_checkpoints(ckpt)) steps.push_back(e.step);
    CHECK(steps == std::vector<std::int64_t>{6, 10});  // keep 1 (the newest) + the best
    CHECK(read_json(fs::path(ckpt) / "best.json")["step"].get<std::int64_t>() == 6);
    CHECK(eval_lines(metrics).size() == 10);  // the resumed metrics file keeps steps 1..6
  }
}

TEST_CASE("checkpoint.save_best saves a checkpoint where an eval beats the best so far", "[train][eval]") {
  const test::TempDir dir("eval_save_best");
  const auto metrics = dir.file("metrics.jsonl");
  const auto ckpt = dir.file("ckpt");
  const Config config = eval_config(dir, {"train.steps=4", "train.eval_every=1", "train.metrics_file=" + metrics,
                                          "checkpoint.dir=" + ckpt, "checkpoint.save_best=true", "checkpoint.keep=0"});
  {
    train::Trainer trainer(config);
    trainer.run(false);
  }
  // Every step whose eval was the lowest so far has a checkpoint (plus the end of the run).
  std::vector<std::int64_t> expected;
  double lowest = INFINITY;
  std::int64_t best = 0;
  for (const auto& line : eval_lines(metrics)) {
    const auto step = line["step"].get<std::int64_t>();
    if (line["eval_loss"].get<double>() < lowest) {
      lowest = line["eval_loss"].get<double>();
      best = step;
      expected.push_back(step);
    }
  }
  if (expected.back() != 4) expected.push_back(4);
  std::vector<std::int64_t> steps;
  for (const auto& e : io::list_checkpoints(ckpt)) steps.push_back(e.step);
  CHECK(steps == expected);
  CHECK(read_json(fs::path(ckpt) / "best.json")["step"].get<std::int64_t>() == best);
}

TEST_CASE("eval config errors name the key and the path, before any training", "[train][eval]") {
  const test::TempDir dir("eval_errors");
  REQUIRE_THROWS_WITH(eval_config(dir, {"train.eval_every=-1"}),
                      Catch::Contains("train.eval_every") && Catch::Contains(">= 0"));
  REQUIRE_THROWS_WITH(eval_config(dir, {"data.eval_max_sequences=-2"}), Catch::Contains("data.eval_max_sequences"));
  const auto metrics = dir.file("metrics.jsonl");
  const auto missing = dir.file("no-such-eval.jsonl");
  const Config config = eval_config(dir, {"data.eval=" + missing, "train.metrics_file=" + metrics});
  REQUIRE_THROWS_WITH(train::Trainer(config),
                      Catch::Contains("data.eval: '" + missing + "' does not exist"));
  CHECK_FALSE(fs::exists(metrics));  // no step ran (the metrics file is opened after the data)
  const auto unmasked = dir.write("unmasked.jsonl", "{\"input_ids\": [1, 2, 3], \"loss_mask\": [0, 0, 0]}\n");
  REQUIRE_THROWS_WITH(train::Trainer(eval_config(dir, {"data.eval=" + unmasked})),
                      Catch::Contains("data.eval: '" + unmasked + "' has no target tokens"));
}
