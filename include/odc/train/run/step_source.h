#pragma once
// A source of the steps' data other than data.train: the Trainer asks it, through this interface
// only, for what its set-up needs (the longest sequence, a fingerprint, the run's length) and,
// before every step, to hand in the step's data (Trainer::train_on). The online RL loop
// (rl/online_rl_loop.h) is one: it samples rollouts with the trainer's current weights. The
// Trainer knows nothing of what a source does.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "odc/model/llama_config.h"
#include "odc/train/checkpoint/checkpointing.h"
#include "odc/train/config/run_settings.h"
#include "odc/train/run/stop_signals.h"

namespace odc::train {

class Trainer;

class StepSource {
 public:
  virtual ~StepSource() = default;
  // Set-up, before the trainer's data and memory plan: the longest sequence it will hand in.
  virtual std::int64_t max_sequence_length() const = 0;
  // What every rank and a resumed checkpoint compare (data_fingerprint, dataset).
  virtual std::uint64_t fingerprint() const = 0;
  virtual std::string describe() const = 0;
  // The run's steps over global batches of `global_batch` sequences (`origin`: where that is set);
  // an odc::Error when they do not fit.
  virtual std::int64_t steps(std::int64_t global_batch, const std::string& origin) = 0;
  // Once the initial state is settled (before the trainer restores a resumed sampler):
  // `checkpoint` is the checkpoint resumed (empty for a fresh start; initial.resumed its manifest).
  virtual void start(Trainer& trainer, const InitialState& initial, const std::string& checkpoint) = 0;
  // Collective, before step `step` runs (asked by run() with its stop signals and by step() with
  // none; a second call for the same step does nothing): hands the trainer the data it trains on
  // from this step. False, on every rank, when a stop request ended it: the run stops.
  virtual bool before_step(Trainer& trainer, std::int64_t step, const StopSignals* signals) = 0;
  // A checkpoint of `step`: what it must keep for a resume, in the manifest and beside it.
  virtual void checkpoint(std::int64_t step, TrainingManifest& manifest,
                          std::vector<std::pair<std::string, std::string>>& files) const = 0;
};

// Made once the trainer knows its settings and model (every rank, `rank` of `world`).
using StepSourceFactory =
    std::function<std::unique_ptr<StepSource>(const RunSettings&, const model::LlamaConfig&, int rank, int world)>;

}  // namespace odc::train
