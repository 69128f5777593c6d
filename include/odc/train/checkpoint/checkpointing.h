#pragma once
// Checkpointing of a training run (native checkpoints, io/native_checkpoint.h): when to save,
// what to resume from (the training half of the manifest: training_manifest.h; the weights a run
// starts from without a checkpoint: starting_weights.h).
//
// A job's checkpoint directory is its own: rank 0 holds a lock on it for the job's lifetime
// (io/directory_lock.h), and begin_run decides the run's identity and what the directory's other
// checkpoints mean for it (train/checkpoint/run_identity.h) — rank 0 decides, every rank learns the answer
// or the same error.
//
// Save: every rank writes its shards (masters, AdamW moments) into the staging directory, a
// barrier, rank 0 commits (manifest, rename, prune this run's older ones), a barrier — so nobody
// moves on, or exits, before the checkpoint is complete. Load: the manifest must describe this
// run (model, data, global minibatch), then every rank reads its shards — re-sliced from the old
// ranks' files when the world size changed (io/native_reshard.h).
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "odc/core/config.h"
#include "odc/distributed/group/host_group.h"
#include "odc/distributed/shard/shard_store.h"
#include "odc/io/directory_lock.h"
#include "odc/model/llama_config.h"
#include "odc/train/checkpoint/best_checkpoint.h"
#include "odc/train/checkpoint/model_export.h"
#include "odc/train/checkpoint/run_identity.h"
#include "odc/train/checkpoint/training_manifest.h"
#include "odc/train/config/run_settings.h"

namespace odc::train {

// What a run's state starts from (Checkpointer::initial_state).
struct InitialState {
  // The manifest of the checkpoint the run resumes (begin_run().resume_path); empty for a fresh
  // start.
  std::optional<TrainingManifest> resumed;
  // "resumed from PATH (step N, ...)": logged by the caller once its own checks of the checkpoint
  // passed too (the online RL loop's), never before.
  std::string resumed_note;
  // Where the model came from (what the export keeps): model.checkpoint's architecture and dtype,
  // as a resumed checkpoint recorded them; empty for random weights.
  ModelSource source;
};

// What a checkpoint to resume must agree with (Checkpointer::load's checks).
struct RunDescription {
  model::LlamaConfig model;
  std::uint64_t data_fingerprint = 0;
  std::string dataset;                 // the data's description ("train.jsonl (1000 sequences)")
  std::int64_t global_minibatch = 0;   // sequences per step, all ranks
};

class Checkpointer {
 public:
  // Collective: with checkpoint.dir, rank 0 creates and locks it (odc::Error on every rank when
  // another job holds it). `settings`: its checkpoint.*, data.seed/shuffle and debug keys;
  // `config`: this job's whole config, which a resume compares with the checkpoint's.
  Checkpointer(const RunSettings& settings, const Config& config, distributed::HostGroup& group);

  bool enabled() const { return !dir_.empty(); }
  // Whether a checkpoint may be written or read (then the data fingerprint is needed).
  bool in_use() const;
  // A periodic save is due after `step` (checkpoint.every), short of the run's last step.
  bool due(std::int64_t step, std::int64_t last_step) const;

  // Collective, once, before save or load: the checkpoint to resume from (checkpoint.resume:
  // auto = the newest complete one in checkpoint.dir, never, or a path; empty = a fresh start),
  // this run's identity, and this run's checkpoints that a rollback abandons. A checkpoint whose
  // manifest has no checksum is refused unless checkpoint.accept_manifest_without_checksum (its
  // values could have been edited undetected; accepted, rank 0 warns: io::check_manifest_checksum_present).
  // odc::Error on every
  // rank when checkpoint.dir holds another run's checkpoints, and with auto when its newest
  // checkpoint is damaged (naming it and the checkpoint.resume setting of the previous good one:
  // with that setting the damaged one is retired). Nothing is moved yet.
  struct RunStart {
    std::string resume_path;
    RunIdentity identity;
    std::vector<std::string> abandoned;
    std::string retire_name;
    std::vector<std::string> damaged;  // damaged step directories after the resume point (to retire)
    std::vector<std::string> damage;   // what is wrong with each
    std::string damaged_name;
  };
  const RunStart& begin_run();
  // Collective, after the resume succeeded: rank 0 moves the damaged step directories after the
  // resume point and the abandoned checkpoints to checkpoint.dir/retired/ (each logged as what it
  // is). Nothing to do without either.
  void retire_abandoned();
  const RunIdentity& identity() const;

  // The shards this rank holds: number `shard_rank` of `shard_world` (default: its rank of the
  // group's size). Where several ranks hold the same shards (train.sharding hybrid: one copy per
  // host) only the ranks with `writes` write them; a checkpoint then has shard_world ranks' files.
  void set_shards(int shard_rank, int shard_world, bool writes);

  // Collective: writes this rank's shards, rank 0 commits `manifest` (with this run's identity)
  // as step `step`, with `files` (name, content) beside it.
  void save(std::int64_t step, const TrainingManifest& manifest, distributed::ShardStore& store,
            const std::vector<std::pair<std::string, std::string>>& files = {});

  // The best checkpoint so far (lowest eval loss; best_checkpoint.h): continued from best.json on
  // a resume, the same on every rank. checkpoint.keep's pruning never removes it.
  const std::optional<BestCheckpoint>& best() const { return best_; }
  // Whether an eval loss beats the best so far (the first eval always does).
  bool is_new_best(double eval_loss) const { return !best_ || eval_loss < best_->eval_loss; }
  // checkpoint.save_best: an eval that is a new best on a step without a checkpoint saves one.
  bool save_best() const { return save_best_; }
  // Every rank: `best` (of a step that has a checkpoint) becomes the best; rank 0 writes best.json.
  void record_best(BestCheckpoint best);

  // Reads `path`'s manifest and this rank's shards into `store`, after checking that it belongs
  // to this run: the same model (`model_config`), and — unless it holds imported weights — the
  // same data (`data_fingerprint`, described by `dataset`), the same data order (data.seed,
  // data.shuffle) and the same global minibatch (sequences per step; 0 skips the check). Rank 0
  // first logs the keys whose values differ from the config the checkpoint saved (config_diff.h).
  // A checkpoint of another
  // world size is resharded. The online RL loop's rollouts saved with it (kRolloutsFile) must match
  // the manifest's fingerprint: damage to them, as to a shard, names the previous good checkpoint.
  TrainingManifest load(const std::string& path, distributed::ShardStore& store, const nlohmann::json& model_config,
                        std::uint64_t data_fingerprint, const std::string& dataset, std::int64_t global_minibatch);

  // Collective, after begin_run and set_shards: puts the run's initial weights (and optimizer
  // state) into `store`, whatever their source — the resume point of begin_run (load, checked
  // against `run`), else the Hugging Face checkpoint `base` (model.checkpoint; every rank reads
  // only its shard of every unit from the safetensors files), else nothing: the store keeps its
  // random initialization. A store that a checkpoint fills is built without a seed (nothing drawn
  // that the load overwrites), one that keeps its random weights with one: the other way round is
  // an error (ShardStore::masters_drawn). The caller restores the sampler and the step from
  // `resumed`, then logs `resumed_note`.
  InitialState initial_state(distributed::ShardStore& store, const std::string& base, const RunDescription& run);

 private:
  // Rank 0, on load: the keys whose values differ from the config the checkpoint saved (a warning: the resume goes on; what makes it impossible fails).
  void report_config_changes(const std::string& path, const nlohmann::json& json,
                             const TrainingManifest& manifest) const;

  distributed::HostGroup& group_;
  Config config_;  // this job's: a resume names the keys whose values differ from the checkpoint's
  int shard_rank_;
  int shard_world_;
  bool writes_shards_ = true;
  std::string dir_;
  std::int64_t every_ = 0;
  int keep_ = 0;
  std::string resume_;
  DataSettings data_;  // data.seed and data.shuffle (and their origins): a resume continues their order
  double debug_delay_ms_ = 0.0;
  std::int64_t debug_delay_rank_ = -1;
  std::optional<io::DirectoryLock> lock_;  // rank 0 with checkpoint.dir
  std::optional<RunStart> start_;
  bool save_best_ = false;
  bool accept_manifest_without_checksum_ = false;
  std::optional<BestCheckpoint> best_;
};

}  // namespace odc::train
