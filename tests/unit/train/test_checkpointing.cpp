// Checkpointer over an in-process group of ranks: every rank's shards and the typed manifest
// survive a save and a load bit for bit; a checkpoint of another world size, model or dataset is
// refused on every rank; the manifest's JSON keeps its field names.
#include <catch2/catch.hpp>

#include "odc/io/native_checkpoint.h"
#include "odc/model/units.h"
#include "odc/train/checkpointing.h"
#include "odc/train/config_schema.h"
#include "unit/rank_threads.h"
#include "unit/temp_dir.h"
#include "unit/tiny_model.h"

using namespace odc;

namespace {

Config checkpoint_config(const std::string& dir, const std::vector<std::string>& extra = {}) {
  Config config(train::trainer_tunables());
  config.apply_assignment("checkpoint.dir=" + dir);
  for (const auto& e : extra) config.apply_assignment(e);
  return config;
}

train::TrainingManifest manifest_for(std::int64_t position) {
  train::TrainingManifest m;
  m.comm = "odc";
  m.optimizer_steps = 7;
  m.sampler = data::SamplerState{11, 2, position, 40, true};
  m.data_fingerprint = train::fingerprint_hex(0xabcdef);
  m.dataset = "d.jsonl (40 sequences)";
  m.model_config = test::tiny_model().to_json();
  m.config = "train:\n  lr: 0.1\n";
  return m;
}
}  // namespace

TEST_CASE("checkpointer: three ranks save and load their shards and the manifest exactly", "[train]") {
  const test::TempDir dir("checkpointer");
  const auto config = test::tiny_model();
  const auto units = model::build_unit_layouts(config);
  // Catch2's assertions are not thread-safe: each rank records what it saw, checked afterwards.
  struct Seen {
    std::vector<bool> due;
    std::string path;
    train::TrainingManifest manifest;
    bool shards_equal = false;
    std::string other_data, other_model;
  };
  std::vector<Seen> seen(3);
  const auto errors = test::on_every_rank(3, [&](distributed::HostGroup& group) {
    Seen& mine = seen[static_cast<std::size_t>(group.rank())];
    const distributed::ShardLayout layout(units, 3, group.rank());
    distributed::ShardStore saved(layout, units, config, 1);
    for (int u = 0; u < layout.num_units(); ++u) {
      for (std::int64_t i = 0; i < layout.unit(u).shard; ++i) {
        saved.exp_avg(u)[i] = static_cast<float>(group.rank() * 1000 + i) * 0.25f;
        saved.exp_avg_sq(u)[i] = static_cast<float>(u) + 0.5f;
      }
    }
    train::Checkpointer checkpointer(checkpoint_config(dir.path().string(), {"checkpoint.every=4"}), group);
    mine.due = {checkpointer.due(8, 10), checkpointer.due(10, 10), checkpointer.due(6, 10)};
    checkpointer.save(8, manifest_for(12), saved);

    // A fresh run of the same world finds it (resume: auto) and reads it back.
    train::Checkpointer again(checkpoint_config(dir.path().string()), group);
    mine.path = again.resume_path();
    distributed::ShardStore loaded(layout, units, config, 2);  // other initial weights
    mine.manifest = again.load(mine.path, loaded, config.to_json(), 0xabcdef, "d.jsonl (40 sequences)");
    mine.shards_equal = true;
    for (int u = 0; u < layout.num_units(); ++u) {
      for (std::int64_t i = 0; i < layout.unit(u).shard; ++i) {
        mine.shards_equal = mine.shards_equal && loaded.master(u)[i] == saved.master(u)[i] &&
                            loaded.exp_avg(u)[i] == saved.exp_avg(u)[i] && loaded.exp_avg_sq(u)[i] == saved.exp_avg_sq(u)[i];
      }
    }
    try {
      again.load(mine.path, loaded, config.to_json(), 0x1234, "e.jsonl");
    } catch (const Error& e) {
      mine.other_data = e.what();
    }
    auto other = config;
    other.hidden_size = 16;
    try {
      again.load(mine.path, loaded, other.to_json(), 0xabcdef, "d.jsonl");
    } catch (const Error& e) {
      mine.other_model = e.what();
    }
  });
  for (std::size_t r = 0; r < seen.size(); ++r) {
    REQUIRE(errors[r].empty());
    const Seen& s = seen[r];
    // checkpoint.every = 4: due after step 8; not after the run's last step (the end saves anyway) nor step 6.
    CHECK(s.due == std::vector<bool>{true, false, false});
    CHECK(s.path == (dir.path() / "step-00000008").string());
    CHECK(s.manifest.step == 8);
    CHECK(s.manifest.world_size == 3);
    CHECK(s.manifest.optimizer_steps == 7);
    CHECK(s.manifest.comm == "odc");
    REQUIRE(s.manifest.sampler.has_value());
    CHECK(*s.manifest.sampler == data::SamplerState{11, 2, 12, 40, true});
    CHECK(s.shards_equal);
    CHECK_THAT(s.other_data, Catch::Contains("was trained on different data (d.jsonl (40 sequences)) than e.jsonl"));
    CHECK_THAT(s.other_model, Catch::Contains("holds a different model"));
  }

  // Two ranks cannot continue a three-rank checkpoint.
  const auto wrong_world = test::on_every_rank(2, [&](distributed::HostGroup& group) {
    const distributed::ShardLayout layout(units, 2, group.rank());
    distributed::ShardStore store(layout, units, config, 1);
    train::Checkpointer checkpointer(checkpoint_config(dir.path().string()), group);
    checkpointer.load(checkpointer.resume_path(), store, config.to_json(), 0xabcdef, "d.jsonl");
  });
  for (const auto& e : wrong_world) CHECK_THAT(e, Catch::Contains("was written by 3 ranks, this run has 2"));
}

TEST_CASE("checkpointer: ranks that would resume from different checkpoints stop together", "[train]") {
  const test::TempDir dir("checkpointer_paths");
  const auto errors = test::on_every_rank(2, [&](distributed::HostGroup& group) {
    train::Checkpointer checkpointer(
        checkpoint_config(dir.path().string(), {"checkpoint.resume=" + dir.file("step-" + std::to_string(group.rank()))}),
        group);
    checkpointer.resume_path();
  });
  for (const auto& e : errors) CHECK_THAT(e, Catch::Contains("the checkpoint to resume from") && Catch::Contains("rank(s) 1"));
}

TEST_CASE("training manifest: JSON field names, and an import without data position", "[train]") {
  auto m = manifest_for(3);
  auto json = m.to_json();
  for (const char* key : {"comm", "optimizer_steps", "sampler", "data_fingerprint", "dataset", "model_config", "config"}) {
    CHECK(json.contains(key));
  }
  CHECK(json["sampler"]["position"] == 3);
  CHECK_FALSE(json.contains("imported_from"));
  json["step"] = 5;
  json["world_size"] = 2;
  const auto back = train::TrainingManifest::from_json(json, "m.json");
  CHECK(back.to_json() == m.to_json());
  CHECK(back.step == 5);

  train::TrainingManifest imported;
  imported.comm = "any";
  imported.imported_from = "/models/x";
  imported.model_config = test::tiny_model().to_json();
  auto ij = imported.to_json();
  CHECK_FALSE(ij.contains("sampler"));
  ij["step"] = 0;
  ij["world_size"] = 1;
  const auto read = train::TrainingManifest::from_json(ij, "i.json");
  CHECK(read.imported());
  CHECK_FALSE(read.sampler.has_value());
  ij.erase("optimizer_steps");
  CHECK_THROWS_WITH(train::TrainingManifest::from_json(ij, "i.json"), Catch::Contains("'i.json': missing 'optimizer_steps'"));
  auto bad = json;
  bad["sampler"]["epoch"] = "two";
  CHECK_THROWS_WITH(train::TrainingManifest::from_json(bad, "m.json"), Catch::Contains("'epoch' has the wrong type"));
}
