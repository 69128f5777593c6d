// What a resume checks before it says "resumed": the online RL loop's rollouts saved with a
// mid-iteration checkpoint (edited or deleted: named with the previous good checkpoint, as a damaged
// shard is), a manifest without its checksum (refused unless checkpoint.accept_manifest_without_checksum),
// and a damaged newest manifest (a short error: the resume setting on its second line, the
// parser's detail cut short). The manifest keeps the metrics lines a full disk kept from the file.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "odc/core/hash.h"
#include "odc/io/native_checkpoint.h"
#include "odc/model/units.h"
#include "odc/train/checkpoint/checkpointing.h"
#include "odc/train/config/config_schema.h"
#include "odc/train/config/run_settings.h"
#include "unit/rank_threads.h"
#include "unit/temp_dir.h"
#include "unit/tiny_model.h"

using namespace odc;
namespace fs = std::filesystem;

namespace {

Config resume_config(const std::string& dir, const std::vector<std::string>& extra = {}) {
  Config config(train::trainer_tunables());
  config.apply_assignment("checkpoint.dir=" + dir);
  config.apply_assignment("data.seed=11");
  for (const auto& e : extra) config.apply_assignment(e);
  return config;
}

train::TrainingManifest manifest_at(std::int64_t position, const std::string& rollouts) {
  train::TrainingManifest m;
  m.comm = "odc";
  m.optimizer_steps = 3;
  m.sampler = data::SamplerState{11, 0, position, 40, true};
  m.data_fingerprint = train::fingerprint_hex(0xabcdef);
  m.dataset = "d.jsonl (40 sequences)";
  m.model_config = test::tiny_model().to_json();
  if (!rollouts.empty()) m.rollouts_fingerprint = train::fingerprint_hex(fnv1a64(rollouts));
  return m;
}

// One rank saves `steps` into `dir`, each with a rollouts file (a mid-iteration checkpoint).
void save_steps(const std::string& dir, const std::vector<std::int64_t>& steps) {
  const auto model = test::tiny_model();
  const auto units = model::build_unit_layouts(model);
  const auto errors = test::on_every_rank(1, [&](distributed::HostGroup& group) {
    const distributed::ShardLayout layout(units, 1, 0);
    distributed::ShardStore store(layout, units, model, 1);
    train::Checkpointer checkpointer(train::resolve_run_settings(resume_config(dir), false), resume_config(dir), group);
    checkpointer.begin_run();
    for (const auto step : steps) {
      const std::string rollouts = fmt::format("{{\"step\": {}}}\n", step);
      checkpointer.save(step, manifest_at(step * 4, rollouts), store, {{train::kRolloutsFile, rollouts}});
    }
  });
  REQUIRE(errors[0].empty());
}

// A new job on `dir` (checkpoint.resume: auto, or `extra`): the resume's note, or its error.
struct Resume {
  std::string note, error;
};
Resume resume(const std::string& dir, const std::vector<std::string>& extra = {}) {
  const auto model = test::tiny_model();
  const auto units = model::build_unit_layouts(model);
  Resume out;
  const auto errors = test::on_every_rank(1, [&](distributed::HostGroup& group) {
    const distributed::ShardLayout layout(units, 1, 0);
    distributed::ShardStore store(layout, units, model, std::nullopt);  // a checkpoint fills it
    const Config config = resume_config(dir, extra);
    train::Checkpointer checkpointer(train::resolve_run_settings(config, false), config, group);
    checkpointer.begin_run();
    out.note = checkpointer.initial_state(store, "", {model, 0xabcdef, "d.jsonl (40 sequences)", 0}).resumed_note;
  });
  out.error = errors[0];
  return out;
}

}  // namespace

TEST_CASE("resume checks: edited or deleted rollouts are named with the previous good checkpoint, before any "
          "'resumed'", "[train][checkpoint]") {
  const test::TempDir dir("resume_rollouts");
  const std::string ckpt = dir.file("ckpt");
  save_steps(ckpt, {2, 3});
  const std::string step3 = ckpt + "/step-00000003";
  const std::string hint = "; to resume from the previous good checkpoint instead: --set checkpoint.resume=" + ckpt +
                           "/step-00000002";
  CHECK(resume(ckpt).note == "resumed from " + step3 + " (step 3, written with comm odc)");

  SECTION("edited") {
    std::ofstream(step3 + "/rollouts.jsonl") << "{\"step\": 9}\n";
    const Resume r = resume(ckpt);
    CHECK(r.note.empty());
    CHECK_THAT(r.error, Catch::Contains("checkpoint '" + step3 + "': " + step3 + "/rollouts.jsonl does not match the "
                                        "fingerprint its manifest recorded") &&
                            Catch::EndsWith("after the checkpoint was saved" + hint + " (or checkpoint.resume: " + ckpt +
                                            "/step-00000002 in the config)"));
    // The setting it names resumes.
    CHECK(resume(ckpt, {"checkpoint.resume=" + ckpt + "/step-00000002"}).note ==
          "resumed from " + ckpt + "/step-00000002 (step 2, written with comm odc)");
  }
  SECTION("deleted") {
    fs::remove(step3 + "/rollouts.jsonl");
    const Resume r = resume(ckpt);
    CHECK(r.note.empty());
    CHECK_THAT(r.error, Catch::Contains(step3 + "/rollouts.jsonl is missing (the rollouts of the online RL iteration "
                                        "it was saved in") &&
                            Catch::Contains(hint));
  }
}

TEST_CASE("resume checks: a manifest without its checksum is refused unless the key accepts it",
          "[train][checkpoint]") {
  const test::TempDir dir("resume_no_checksum");
  const std::string ckpt = dir.file("ckpt");
  save_steps(ckpt, {2});
  const std::string manifest_path = ckpt + "/step-00000002/manifest.json";
  auto json = nlohmann::json::parse(std::ifstream(manifest_path));
  json.erase(io::kManifestChecksumKey);
  json["optimizer_steps"] = 30;  // and a value edited: undetectable without the checksum
  std::ofstream(manifest_path) << json.dump(2);

  const Resume refused = resume(ckpt);
  CHECK(refused.note.empty());
  CHECK_THAT(refused.error, Catch::StartsWith("checkpoint '" + ckpt + "/step-00000002': its manifest has no "
                                              "manifest_checksum, so an edit of its values") &&
                                Catch::Contains("\n  to resume it anyway: --set "
                                                "checkpoint.accept_manifest_without_checksum=true"));
  const Resume accepted = resume(ckpt, {"checkpoint.accept_manifest_without_checksum=true"});
  CHECK(accepted.error.empty());
  CHECK(accepted.note == "resumed from " + ckpt + "/step-00000002 (step 2, written with comm odc)");
}

TEST_CASE("resume checks: a truncated newest manifest is a short error, the setting to resume on its second line",
          "[train][checkpoint]") {
  const test::TempDir dir("resume_truncated");
  const std::string ckpt = dir.file("ckpt");
  save_steps(ckpt, {2, 4});
  // A manifest whose config is long: cut inside it, the parser quoted all of it (~10,000 characters).
  const std::string manifest_path = ckpt + "/step-00000004/manifest.json";
  auto json = nlohmann::json::parse(std::ifstream(manifest_path));
  json["config"] = std::string(10000, 'x');
  const std::string text = json.dump(2);
  std::ofstream(manifest_path) << text.substr(0, text.find(std::string(100, 'x')) + 5000);

  const Resume r = resume(ckpt);
  std::vector<std::string> lines;
  std::istringstream in(r.error);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  REQUIRE(lines.size() == 3);
  CHECK_THAT(lines[0], Catch::StartsWith("checkpoint.dir '" + ckpt + "': the newest checkpoint " + ckpt +
                                         "/step-00000004 is damaged: checkpoint manifest '" + manifest_path +
                                         "' is not valid JSON (it is damaged: truncated or edited): ") &&
                           Catch::EndsWith("more characters)"));
  // The path, what is wrong, and 200 characters of the parser's message.
  CHECK(lines[0].size() < 200 + 2 * manifest_path.size() + 250);
  CHECK(lines[1] == "  to resume from the previous good checkpoint: --set checkpoint.resume=" + ckpt +
                        "/step-00000002 (the damaged one is then moved to " + ckpt + "/retired/), or repair or replace " +
                        ckpt + "/step-00000004 and run again");
  CHECK_THAT(lines[2], Catch::StartsWith("  checkpoint.resume: auto does not pass over a damaged checkpoint"));
}

TEST_CASE("training manifest: the metrics lines a full disk kept from the file round-trip by rank", "[train]") {
  train::TrainingManifest m = manifest_at(8, "");
  m.unwritten_metrics = {{0, {"{\"loss\":2.5,\"step\":3}"}}, {3, {"{\"step\":3}", "{\"eval_loss\":1.0,\"step\":3}"}}};
  auto json = m.to_json();
  CHECK(json["unwritten_metrics"]["3"][1] == "{\"eval_loss\":1.0,\"step\":3}");
  json["step"] = 3;
  json["world_size"] = 4;
  CHECK(train::TrainingManifest::from_json(json, "m.json").unwritten_metrics == m.unwritten_metrics);
  CHECK_FALSE(manifest_at(8, "").to_json().contains("unwritten_metrics"));  // none: no field
  auto bad = json;
  bad["unwritten_metrics"] = {{"one", nlohmann::json::array()}};
  CHECK_THROWS_WITH(train::TrainingManifest::from_json(bad, "m.json"),
                    "checkpoint manifest 'm.json': 'unwritten_metrics' must be keyed by rank numbers, found 'one'");
  bad["unwritten_metrics"] = {{"0", "line"}};
  CHECK_THROWS_WITH(train::TrainingManifest::from_json(bad, "m.json"), Catch::Contains("'0' has the wrong type"));
}
