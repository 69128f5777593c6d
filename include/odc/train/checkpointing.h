#pragma once
// Checkpointing of a training run (native checkpoints, io/native_checkpoint.h): when to save,
// what to resume from, and the training half of the manifest as a type.
//
// Save: every rank writes its shards (masters, AdamW moments) into the staging directory, a
// barrier, rank 0 commits (manifest, rename, prune), a barrier — so nobody moves on, or exits,
// before the checkpoint is complete. Load: the manifest must describe this run (world size,
// model, data), then every rank reads its own shards.
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "odc/core/config.h"
#include "odc/data/packing.h"
#include "odc/distributed/host_group.h"
#include "odc/distributed/shard_store.h"

namespace odc::train {

// What a native checkpoint's manifest records about the training run; io adds the format
// version, the step, the world size and the per-rank files.
struct TrainingManifest {
  std::string comm;                          // the comm that wrote it ("any": imported weights)
  std::int64_t optimizer_steps = 0;
  std::optional<data::SamplerState> sampler;  // absent when imported: the data starts over
  std::string data_fingerprint;              // 16 hex digits of the dataset's fingerprint
  std::string dataset;                       // what the data was ("train.jsonl (1000 sequences)")
  nlohmann::json model_config;
  std::string config;                        // the effective configuration (YAML)
  std::string imported_from;                 // the Hugging Face directory of `odc-ckpt import`
  // Read back from io's fields.
  std::int64_t step = 0;
  int world_size = 0;

  bool imported() const { return !imported_from.empty(); }
  nlohmann::json to_json() const;
  // odc::Error naming `where` for a missing or mistyped field.
  static TrainingManifest from_json(const nlohmann::json& manifest, const std::string& where);
};

std::string fingerprint_hex(std::uint64_t fingerprint);

class Checkpointer {
 public:
  Checkpointer(const Config& config, distributed::HostGroup& group);

  bool enabled() const { return !dir_.empty(); }
  // Whether a checkpoint may be written or read (then the data fingerprint is needed).
  bool in_use() const;
  // A periodic save is due after `step` (checkpoint.every), short of the run's last step.
  bool due(std::int64_t step, std::int64_t last_step) const;

  // The checkpoint to resume from (checkpoint.resume: auto = the newest complete one in
  // checkpoint.dir, never, or a path), or empty. Collective: ranks must agree (a shared directory
  // seen at different moments could differ), else every rank fails.
  std::string resume_path();

  // Collective: writes this rank's shards, rank 0 commits `manifest` as step `step`.
  void save(std::int64_t step, const TrainingManifest& manifest, distributed::ShardStore& store);

  // Reads `path`'s manifest and this rank's shards into `store`, after checking that it belongs
  // to this run: same world size and model (`model_config`), and — unless it holds imported
  // weights — the same data (`data_fingerprint`, described by `dataset`).
  TrainingManifest load(const std::string& path, distributed::ShardStore& store, const nlohmann::json& model_config,
                        std::uint64_t data_fingerprint, const std::string& dataset);

 private:
  distributed::HostGroup& group_;
  std::string dir_;
  std::int64_t every_ = 0;
  int keep_ = 0;
  std::string resume_;
  double debug_delay_ms_ = 0.0;
  std::int64_t debug_delay_rank_ = -1;
};

}  // namespace odc::train
