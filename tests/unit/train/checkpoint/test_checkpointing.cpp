// Checkpointer over an in-process group of ranks: every rank's shards and the typed manifest
// survive a save and a load bit for bit; a checkpoint of another world size is resharded, one of
// another model, dataset or global minibatch is refused on every rank; the manifest's JSON keeps
// its field names. The directory belongs to one run: a second job is refused while the first
// holds it, another run's checkpoints are an error, a rollback retires the abandoned branch.
// initial_state: one call, whatever the run starts from (random weights, a Hugging Face
// checkpoint read shard by shard, a checkpoint resumed).
#include <catch2/catch.hpp>

#include "odc/io/hf_checkpoint.h"
#include "odc/io/native_checkpoint.h"
#include "odc/model/units.h"
#include "odc/train/checkpoint/checkpointing.h"
#include "odc/train/config/config_schema.h"
#include "odc/train/config/run_settings.h"
#include "unit/rank_threads.h"
#include "unit/temp_dir.h"
#include "unit/tiny_model.h"

using namespace odc;

namespace {

// A Checkpointer as the trainer makes it: its settings resolved from `config`.
train::Checkpointer checkpointer_for(const Config& config, distributed::HostGroup& group) {
  return train::Checkpointer(train::resolve_run_settings(config, false), config, group);
}

Config checkpoint_config(const std::string& dir, const std::vector<std::string>& extra = {}) {
  Config config(train::trainer_tunables());
  config.apply_assignment("checkpoint.dir=" + dir);
  config.apply_assignment("data.seed=11");  // manifest_for's sampler seed: a resume checks data.seed
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
  m.global_minibatch = 12;
  return m;
}
// One job on `dir` over a one-rank group: begins the run, saves `steps`, returns the run's
// identity (or the error).
struct Job {
  train::RunIdentity identity;
  std::string resumed, error;
  std::vector<std::string> abandoned;
};
Job run_job(const std::string& dir, const std::vector<std::string>& settings, const std::vector<std::int64_t>& steps) {
  Job job;
  const auto config = test::tiny_model();
  const auto units = model::build_unit_layouts(config);
  const auto errors = test::on_every_rank(1, [&](distributed::HostGroup& group) {
    const distributed::ShardLayout layout(units, 1, 0);
    distributed::ShardStore store(layout, units, config, 1);
    train::Checkpointer checkpointer = checkpointer_for(checkpoint_config(dir, settings), group);
    const auto& start = checkpointer.begin_run();
    job.identity = start.identity;
    job.resumed = start.resume_path;
    job.abandoned = start.abandoned;
    checkpointer.retire_abandoned();
    for (const auto step : steps) checkpointer.save(step, manifest_for(step), store);
  });
  job.error = errors[0];
  return job;
}

std::vector<std::string> names_in(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : io::list_checkpoints(dir.string())) names.push_back(std::filesystem::path(e.path).filename().string());
  return names;
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
    std::string other_data, other_model, other_batch;
    std::string fresh_run;
    train::RunIdentity identity;
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
    {
      train::Checkpointer checkpointer = checkpointer_for(checkpoint_config(dir.path().string(), {"checkpoint.every=4"}), group);
      mine.due = {checkpointer.due(8, 10), checkpointer.due(10, 10), checkpointer.due(6, 10)};
      mine.fresh_run = checkpointer.begin_run().identity.run_id;
      checkpointer.save(8, manifest_for(12), saved);
    }

    // A fresh job of the same world finds it (resume: auto) and reads it back.
    train::Checkpointer again = checkpointer_for(checkpoint_config(dir.path().string()), group);
    const auto& start = again.begin_run();
    mine.path = start.resume_path;
    mine.identity = start.identity;
    distributed::ShardStore loaded(layout, units, config, 2);  // other initial weights
    mine.manifest = again.load(mine.path, loaded, config.to_json(), 0xabcdef, "d.jsonl (40 sequences)", 0);
    mine.shards_equal = true;
    for (int u = 0; u < layout.num_units(); ++u) {
      for (std::int64_t i = 0; i < layout.unit(u).shard; ++i) {
        mine.shards_equal = mine.shards_equal && loaded.master(u)[i] == saved.master(u)[i] &&
                            loaded.exp_avg(u)[i] == saved.exp_avg(u)[i] && loaded.exp_avg_sq(u)[i] == saved.exp_avg_sq(u)[i];
      }
    }
    try {
      again.load(mine.path, loaded, config.to_json(), 0x1234, "e.jsonl", 0);
    } catch (const Error& e) {
      mine.other_data = e.what();
    }
    try {
      again.load(mine.path, loaded, config.to_json(), 0xabcdef, "d.jsonl", 10);  // manifest_for: 12 per step
    } catch (const Error& e) {
      mine.other_batch = e.what();
    }
    auto other = config;
    other.hidden_size = 16;
    try {
      again.load(mine.path, loaded, other.to_json(), 0xabcdef, "d.jsonl", 0);
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
    CHECK_THAT(s.other_batch, Catch::Contains("was trained with 12 sequences per step (data.minibatch_size 4 x 3 ranks), "
                                              "this run draws 10") &&
                                  Catch::Contains("set data.minibatch_size=4 to continue it on 3 ranks"));
    // The run's identity: made at the fresh start (the same on every rank), inherited on resume,
    // with the checkpoint resumed from as its lineage.
    CHECK(s.fresh_run == seen[0].fresh_run);
    CHECK(s.identity.run_id == s.fresh_run);
    CHECK(s.manifest.identity.run_id == s.fresh_run);
    REQUIRE(s.identity.lineage.size() == 1);
    CHECK(s.identity.lineage[0].step == 8);
    CHECK(s.identity.lineage[0].segment == s.manifest.identity.segment);
    CHECK(s.identity.segment != s.manifest.identity.segment);
  }

  // Two and four ranks continue the three-rank checkpoint: each unit's flat state, re-sliced.
  for (const int world : {2, 4}) {
    std::vector<int> equal(static_cast<std::size_t>(world), 0);
    const auto resharded = test::on_every_rank(world, [&](distributed::HostGroup& group) {
      const distributed::ShardLayout layout(units, world, group.rank());
      distributed::ShardStore store(layout, units, config, 3);
      train::Checkpointer checkpointer = checkpointer_for(checkpoint_config(dir.path().string()), group);
      const auto manifest = checkpointer.load(checkpointer.begin_run().resume_path, store, config.to_json(), 0xabcdef,
                                              "d.jsonl", 12);
      // The expected state, as the 3-rank writer set it: masters from seed 1, moments by formula.
      const distributed::ShardStore reference(layout, units, config, 1);
      bool same = manifest.world_size == 3;
      for (int u = 0; u < layout.num_units(); ++u) {
        for (std::int64_t j = 0; j < layout.unit(u).shard; ++j) {
          const std::int64_t i = layout.shard_begin(u, group.rank()) + j;
          const std::int64_t old_shard = (layout.unit(u).numel + 2) / 3;
          const bool real = i < layout.unit(u).numel;
          const auto old_rank = static_cast<float>(i / old_shard);
          const float m = real ? (old_rank * 1000 + static_cast<float>(i % old_shard)) * 0.25f : 0.0f;
          const float v = real ? static_cast<float>(u) + 0.5f : 0.0f;
          same = same && store.master(u)[j] == reference.master(u)[j] && store.exp_avg(u)[j] == m &&
                 store.exp_avg_sq(u)[j] == v;
        }
      }
      equal[static_cast<std::size_t>(group.rank())] = same ? 1 : 0;
    });
    for (int r = 0; r < world; ++r) {
      INFO("world " << world << " rank " << r << ": " << resharded[static_cast<std::size_t>(r)]);
      CHECK(resharded[static_cast<std::size_t>(r)].empty());
      CHECK(equal[static_cast<std::size_t>(r)] == 1);
    }
  }
}

TEST_CASE("checkpointer: ranks that would resume from different checkpoints stop together", "[train]") {
  const test::TempDir dir("checkpointer_paths");
  const auto errors = test::on_every_rank(2, [&](distributed::HostGroup& group) {
    train::Checkpointer checkpointer = checkpointer_for(
        checkpoint_config(dir.path().string(), {"checkpoint.resume=" + dir.file("step-" + std::to_string(group.rank()))}),
        group);
    checkpointer.begin_run();
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

TEST_CASE("checkpointer: a second job on the directory is refused on every rank, naming the first", "[train][lock]") {
  const test::TempDir dir("checkpointer_lock");
  const std::string ckpt = dir.file("ckpt");
  // The first job (one rank) holds the directory while a second job of two ranks starts on it.
  const auto first = test::on_every_rank(1, [&](distributed::HostGroup& holder) {
    train::Checkpointer running = checkpointer_for(checkpoint_config(ckpt), holder);
    const std::string run = running.begin_run().identity.run_id;
    const auto second = test::on_every_rank(2, [&](distributed::HostGroup& group) {
      train::Checkpointer refused = checkpointer_for(checkpoint_config(ckpt), group);
    });
    for (const auto& e : second) {
      if (e.find("checkpoint directory '" + ckpt + "' is in use by run " + run + " (host ") == std::string::npos) {
        throw Error("rank saw: '" + e + "'");
      }
    }
  });
  CHECK(first[0].empty());
  // Released with the first job: a third one gets it.
  CHECK(run_job(ckpt, {}, {}).error.empty());
}

TEST_CASE("checkpointer: resume never into another run's directory is an error, keep prunes this run only",
          "[train][runs]") {
  const test::TempDir dir("checkpointer_runs");
  const std::string ckpt = dir.file("ckpt");
  const Job old = run_job(ckpt, {"checkpoint.keep=2"}, {50, 60});
  REQUIRE(old.error.empty());
  const Job fresh = run_job(ckpt, {"checkpoint.resume=never", "checkpoint.keep=2"}, {10});
  CHECK_THAT(fresh.error, Catch::Contains("checkpoint.dir '" + ckpt + "' holds the checkpoints of run " +
                                          old.identity.run_id + " (step-00000050, step-00000060), and "
                                          "checkpoint.resume is never") &&
                              Catch::Contains("use a new checkpoint.dir"));
  CHECK(names_in(ckpt) == std::vector<std::string>{"step-00000050", "step-00000060"});  // nothing written

  // Resuming another directory's run into this one mixes two runs as well.
  const std::string other = dir.file("other");
  REQUIRE(run_job(other, {}, {5}).error.empty());
  const Job mixed = run_job(ckpt, {"checkpoint.resume=" + other + "/step-00000005"}, {6});
  CHECK_THAT(mixed.error, Catch::Contains("holds the checkpoints of run " + old.identity.run_id) &&
                              Catch::Contains("a checkpoint directory belongs to one run"));

  // The same run resumed keeps its identity; pruning (keep 2) leaves another run's checkpoints
  // alone: here the new directory of a fresh run next to the old one's untouched copy.
  const std::string shared = dir.file("shared");
  REQUIRE(run_job(shared, {"checkpoint.keep=2"}, {1, 2, 3}).error.empty());
  CHECK(names_in(shared) == std::vector<std::string>{"step-00000002", "step-00000003"});
  const Job again = run_job(shared, {"checkpoint.keep=2"}, {4});
  CHECK(again.error.empty());
  CHECK(again.resumed == shared + "/step-00000003");
  CHECK(names_in(shared) == std::vector<std::string>{"step-00000003", "step-00000004"});
}

TEST_CASE("checkpointer: a rollback retires the abandoned branch, auto-resume follows the new one", "[train][runs]") {
  const test::TempDir dir("checkpointer_rollback");
  const std::string ckpt = dir.file("ckpt");
  const Job first = run_job(ckpt, {"checkpoint.keep=3"}, {20, 40, 60});
  REQUIRE(first.error.empty());
  // Roll back to step 20 and train to 30 (keep 3: 20 stays, it is the new branch's past).
  const Job rollback = run_job(ckpt, {"checkpoint.keep=3", "checkpoint.resume=" + ckpt + "/step-00000020"}, {30});
  REQUIRE(rollback.error.empty());
  CHECK(rollback.identity.run_id == first.identity.run_id);
  CHECK(rollback.abandoned.size() == 2);
  CHECK(names_in(ckpt) == std::vector<std::string>{"step-00000020", "step-00000030"});
  const auto retired = std::filesystem::path(ckpt) / "retired" /
                       ("after-step-00000020-" + rollback.identity.segment);
  CHECK(std::filesystem::exists(retired / "step-00000040" / "manifest.json"));
  CHECK(std::filesystem::exists(retired / "step-00000060" / "manifest.json"));

  // auto: the new branch's step-30, whose lineage is the rollback point.
  const Job next = run_job(ckpt, {"checkpoint.keep=3"}, {40});
  REQUIRE(next.error.empty());
  CHECK(next.resumed == ckpt + "/step-00000030");
  CHECK(next.abandoned.empty());
  REQUIRE(next.identity.lineage.size() == 2);
  CHECK(next.identity.lineage[0].step == 20);
  CHECK(next.identity.lineage[1].step == 30);
  CHECK(names_in(ckpt) == std::vector<std::string>{"step-00000020", "step-00000030", "step-00000040"});

  // Restoring the abandoned branch from retired/ retires the new branch in turn (step-20, its
  // common past, stays).
  const Job restore = run_job(ckpt, {"checkpoint.resume=" + (retired / "step-00000060").string()}, {});
  REQUIRE(restore.error.empty());
  CHECK(names_in(ckpt) == std::vector<std::string>{"step-00000020"});
}

TEST_CASE("checkpointer: the initial state is the random init, the Hugging Face weights or the resumed checkpoint",
          "[train][checkpoint]") {
  const test::TempDir dir("initial_state");
  const auto config = test::tiny_model();
  const auto units = model::build_unit_layouts(config);
  const std::string base = dir.file("base");
  const std::string ckpt = dir.file("ckpt");
  io::write_hf_checkpoint(base, config, "LlamaForCausalLM", DType::f32, [&](int u, float* out) {
    const auto& unit = units[static_cast<std::size_t>(u)];
    model::init_unit_range(unit, config, 7, 0, unit.numel, out);
  });
  const train::RunDescription run{config, 0xabcdef, "d.jsonl (40 sequences)", 12};
  struct Seen {
    std::string early;                              // initial_state before begin_run
    std::string drawn_then_loaded;                  // a store with random weights given to a load
    bool random_kept = false, hf_read = false, resumed_read = false;
    train::InitialState random, hf, resumed;
  };
  std::vector<Seen> seen(2);
  // Whether every element of this rank's shards equals `expected(u, index in the unit)`, and the
  // padding past a unit's end is zero.
  const auto shards_are = [&](const distributed::ShardStore& store, const auto& expected) {
    const auto& layout = store.layout();
    for (int u = 0; u < layout.num_units(); ++u) {
      const std::int64_t begin = layout.shard_begin(u, layout.rank());
      for (std::int64_t i = 0; i < layout.unit(u).shard; ++i) {
        const float want = begin + i < layout.unit(u).numel ? expected(u, begin + i) : 0.0f;
        if (store.master(u)[i] != want) return false;
      }
    }
    return true;
  };
  const auto errors = test::on_every_rank(2, [&](distributed::HostGroup& group) {
    Seen& mine = seen[static_cast<std::size_t>(group.rank())];
    const distributed::ShardLayout layout(units, 2, group.rank());
    const distributed::ShardStore reference(layout, units, config, 1);
    std::vector<std::vector<float>> hf_units;
    for (const auto& unit : units) {
      hf_units.emplace_back(static_cast<std::size_t>(unit.numel));
      model::init_unit_range(unit, config, 7, 0, unit.numel, hf_units.back().data());
    }
    const auto hf_weight = [&](int u, std::int64_t i) {
      return hf_units[static_cast<std::size_t>(u)][static_cast<std::size_t>(i)];
    };
    {  // No checkpoint.dir, no model.checkpoint: the store's random weights stay.
      distributed::ShardStore store(layout, units, config, 1);
      train::Checkpointer checkpointer = checkpointer_for(Config(train::trainer_tunables()), group);
      try {
        (void)checkpointer.initial_state(store, "", run);
      } catch (const Error& e) {
        mine.early = e.what();
      }
      checkpointer.begin_run();
      mine.random = checkpointer.initial_state(store, "", run);
      mine.random_kept = shards_are(store, [&](int u, std::int64_t i) {
        return reference.master(u)[i - layout.shard_begin(u, layout.rank())];
      });
    }
    {  // A store that drew random weights is not what a load fills: refused, naming both.
      distributed::ShardStore store(layout, units, config, 1);
      train::Checkpointer checkpointer = checkpointer_for(Config(train::trainer_tunables()), group);
      checkpointer.begin_run();
      try {
        (void)checkpointer.initial_state(store, base, run);
      } catch (const Error& e) {
        mine.drawn_then_loaded = e.what();
      }
    }
    {  // A fresh run from model.checkpoint: every rank reads its shard into a store that drew nothing;
       // then a checkpoint of step 5.
      distributed::ShardStore store(layout, units, config, std::nullopt);
      REQUIRE_FALSE(store.masters_drawn());
      train::Checkpointer checkpointer = checkpointer_for(checkpoint_config(ckpt), group);
      checkpointer.begin_run();
      mine.hf = checkpointer.initial_state(store, base, run);
      mine.hf_read = shards_are(store, hf_weight);
      auto manifest = manifest_for(12);
      manifest.source_architecture = "Qwen2ForCausalLM";  // what the checkpoint says wins over the base's
      manifest.source_dtype = "bfloat16";
      for (int u = 0; u < layout.num_units(); ++u) store.master(u)[0] = 1000.0f + static_cast<float>(u);
      checkpointer.save(5, manifest, store);
    }
    {  // The next run resumes step 5 (checkpoint.resume: auto): the base's weights are not read.
      distributed::ShardStore store(layout, units, config, std::nullopt);
      train::Checkpointer checkpointer = checkpointer_for(checkpoint_config(ckpt), group);
      checkpointer.begin_run();
      mine.resumed = checkpointer.initial_state(store, base, run);
      mine.resumed_read = shards_are(store, [&](int u, std::int64_t i) {
        return i == layout.shard_begin(u, layout.rank()) ? 1000.0f + static_cast<float>(u) : hf_weight(u, i);
      });
    }
  });
  for (const auto& e : errors) REQUIRE(e.empty());
  for (const auto& mine : seen) {
    CHECK_THAT(mine.early, Catch::Contains("Checkpointer::initial_state called before begin_run"));
    CHECK_THAT(mine.drawn_then_loaded, Catch::Contains("were drawn from the random initialization, but a checkpoint "
                                                       "fills them"));
    CHECK_FALSE(mine.random.resumed.has_value());
    CHECK(mine.random.source.architecture.empty());
    CHECK_FALSE(mine.random.source.dtype.has_value());
    CHECK(mine.random_kept);
    CHECK_FALSE(mine.hf.resumed.has_value());
    CHECK(mine.hf.source.architecture == "LlamaForCausalLM");
    CHECK(mine.hf.source.dtype == DType::f32);
    CHECK(mine.hf_read);
    REQUIRE(mine.resumed.resumed.has_value());
    CHECK(mine.resumed.resumed->step == 5);
    CHECK(mine.resumed.resumed->optimizer_steps == 7);
    CHECK(mine.resumed.source.architecture == "Qwen2ForCausalLM");
    CHECK(mine.resumed.source.dtype == DType::bf16);
    CHECK(mine.resumed_read);
  }
}
