#pragma once
// The training half of a native checkpoint's manifest as a type (io/native_checkpoint.h writes and
// reads the whole manifest; the Checkpointer fills and checks this half).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "odc/data/packing.h"
#include "odc/train/checkpoint/run_identity.h"

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
  RunIdentity identity;                      // run, segment, lineage (empty: before run ids)
  std::int64_t global_minibatch = 0;         // sequences per step, all ranks (0: not recorded)
  // The Hugging Face directory training started from (model.checkpoint): what the export keeps
  // (architecture, dtype); empty when it started from random weights.
  std::string source_architecture;
  std::string source_dtype;
  // The online RL loop, saved in the middle of an iteration: the fingerprint (16 hex digits) of the
  // iteration's rollout records, kept beside the manifest as kRolloutsFile (empty otherwise).
  std::string rollouts_fingerprint;
  // The metrics lines each rank could not write (a full disk) by the step this checkpoint holds,
  // keyed by rank: a resume writes them back (MetricsWriter), so the metrics file holds every step
  // the checkpoint holds. Empty for a checkpoint saved without a metrics failure.
  std::map<int, std::vector<std::string>> unwritten_metrics;
  // Read back from io's fields.
  std::int64_t step = 0;
  int world_size = 0;

  bool imported() const { return !imported_from.empty(); }
  nlohmann::json to_json() const;
  // odc::Error naming `where` for a missing or mistyped field.
  static TrainingManifest from_json(const nlohmann::json& manifest, const std::string& where);
};

std::string fingerprint_hex(std::uint64_t fingerprint);

// The online RL loop's current rollouts, in a checkpoint saved in the middle of an iteration.
inline constexpr const char* kRolloutsFile = "rollouts.jsonl";

}  // namespace odc::train
