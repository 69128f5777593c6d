#pragma once
// The online RL loop (rl.prompts): every rl.epochs_per_iteration x rollouts / global batch steps,
// an iteration's rollouts are sampled with the policy's current weights (OnlineRollouts, through
// the trainer's comm: a WeightSnapshot), scored by the frozen reference (rl.kl_beta: the weights
// the run started from, this rank's shard of them, kept here) and handed to the trainer, which
// trains on them with its GRPO objective. It drives the trainer's steps as a StepSource: the
// Trainer knows nothing of RL. A checkpoint in the middle of an iteration keeps its rollouts
// (kRolloutsFile, JSONL: the one place the records are text), which a resume trains on.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "odc/data/rollouts.h"
#include "odc/train/rl/online_rollouts.h"
#include "odc/train/run/step_source.h"

namespace odc::train {

class OnlineRlLoop final : public StepSource {
 public:
  OnlineRlLoop(const RunSettings& settings, const model::LlamaConfig& model, int rank, int world);
  // The factory the Trainer takes (odc-train passes it when rl.prompts is set).
  static StepSourceFactory factory();

  std::int64_t max_sequence_length() const override { return rollouts_.max_sequence_length(); }
  std::uint64_t fingerprint() const override { return rollouts_.fingerprint(); }
  std::string describe() const override { return rollouts_.describe(); }
  std::int64_t steps(std::int64_t global_batch, const std::string& origin) override;
  void start(Trainer& trainer, const InitialState& initial, const std::string& checkpoint) override;
  bool before_step(Trainer& trainer, std::int64_t step, const StopSignals* signals) override;
  void checkpoint(std::int64_t step, TrainingManifest& manifest,
                  std::vector<std::pair<std::string, std::string>>& files) const override;

 private:
  // The rollouts of the iteration that starts at `step`, sampled with the current weights and
  // handed to the trainer. False, on every rank, when a stop request on rank 0 (`signals`) ended
  // its reward command.
  bool begin_iteration(Trainer& trainer, std::int64_t step, const StopSignals* signals);
  // A resume in the middle of an iteration: its rollouts, as the checkpoint kept them.
  void resume_iteration(Trainer& trainer, const std::string& checkpoint, const TrainingManifest& manifest);
  // Collective: `weights` (this rank's shard of every unit) into the trainer's store's masters,
  // where the comm serves them from; returns the masters that were there.
  static std::vector<float> swap_masters(Trainer& trainer, std::vector<float> weights);

  RunSettings settings_;
  model::LlamaConfig model_;
  OnlineRollouts rollouts_;
  std::int64_t steps_per_iteration_ = 0;
  std::int64_t sampled_for_ = -1;               // the step whose iteration was sampled last
  std::vector<data::RolloutRecord> records_;    // the current iteration's (kept by a checkpoint mid-iteration)
  std::string resumed_records_;                 // or, after a resume mid-iteration, the checkpoint's file
  std::vector<float> reference_;                // rl.kl_beta: this rank's shard of the frozen reference
};

}  // namespace odc::train
