// The Trainer's part of the online RL loop (rl.prompts): each iteration's rollouts sampled with the
// weights the ranks hold, and a resume in the middle of an iteration.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <spdlog/spdlog.h>

#include "odc/core/error.h"
#include "odc/data/rollouts.h"
#include "odc/io/native_checkpoint.h"
#include "odc/model/weight_snapshot.h"
#include "odc/train/run/trainer.h"

namespace odc::train {

bool Trainer::begin_iteration(const StopSignals* signals) {
  const std::int64_t iteration = step_ / steps_per_iteration_;
  sampled_for_ = step_;
  distributed::Comm& comm = comm_->comm();
  model_->set_tracer(nullptr);
  comm.set_tracer(nullptr);
  // Every unit's full weights, once, through the comm (the same acquires on every rank, so a
  // collective comm's lockstep holds); then thousands of decode forwards fetch nothing.
  // The compute copies a one-rank backend keeps are keyed by the pointers it computed on: dropped
  // when a snapshot comes and when it goes, so its copies reuse the masters' storage and none are
  // left keyed by a freed snapshot's addresses (Backend::forget_weight_copies).
  const auto snapshot = [&](const char* what) {
    backend_->forget_weight_copies();
    group_.announce(fmt::format("iteration {}: gathering the {} weights", iteration + 1, what));
    comm.begin_minibatch();
    auto weights = std::make_unique<model::WeightSnapshot>(*backend_, model_->units(), comm);
    comm.end_minibatch();
    return weights;
  };
  DrawnRollouts drawn;
  {
    const auto policy = snapshot("policy");
    group_.announce(fmt::format("iteration {}: sampling rollouts", iteration + 1));
    drawn = online_->draw(iteration, *model_, *policy, fmt::format("the policy at step {}", step_));
  }
  backend_->forget_weight_copies();  // compute copies made of a snapshot's weights go with it
  if (!reference_.empty()) {
    // The frozen reference is sharded like the policy: its shards take the masters' place while
    // the comm gathers them, then the policy's return.
    reference_ = swap_masters(std::move(reference_));
    auto reference = snapshot("reference");
    reference_ = swap_masters(std::move(reference_));
    group_.announce(fmt::format("iteration {}: reference log-probabilities", iteration + 1));
    online_->add_reference(drawn, *model_, *reference, data_->token_cap());
    reference.reset();
    backend_->forget_weight_copies();
  }
  group_.announce(fmt::format("iteration {}: scoring and gathering the rollouts", iteration + 1));
  auto sampled = online_->gather(std::move(drawn), group_, [signals] { return signals != nullptr && signals->requested(); });
  if (!sampled) {
    if (group_.is_root()) {
      spdlog::warn("stop requested ({}) while rl.reward_command scored iteration {}: the command and every process it "
                   "started were killed and the iteration's rollouts dropped (a resume samples it anew); the run ends "
                   "as at a stop after a step", signals->describe(), iteration + 1);
    }
    return false;
  }
  sampled->stats["step"] = step_ + 1;  // the first step that trains on them
  record_metrics([&] { report_->record_rollouts(sampled->stats); });
  use_rollouts(iteration, std::move(sampled->records));
  return true;
}

void Trainer::keep_reference(const InitialState& initial) {
  const RunSettings& settings = settings_;
  if (settings.model.checkpoint.empty() && initial.resumed && initial.resumed->imported()) {
    fail("rl.kl_beta in the online RL loop keeps the weights the run started from as the reference, but they came "
         "from an imported checkpoint ({}); set model.checkpoint to them", initial.resumed->imported_from);
  }
  reference_ = starting_weights(store().layout(), model_->units(), model_config_, settings.model.seed,
                                settings.model.checkpoint);
}

std::vector<float> Trainer::swap_masters(std::vector<float> weights) {
  group_.barrier("the reference swap (every rank done reading the masters)");
  distributed::ShardStore& s = store();
  s.pull_to_host();
  const std::span<float> masters = s.host_masters();
  ODC_CHECK(weights.size() == masters.size(), "swap_masters: {} weights for {} masters", weights.size(), masters.size());
  std::vector<float> previous(masters.begin(), masters.end());
  std::copy(weights.begin(), weights.end(), masters.begin());
  s.push_to_device();
  backend_->weights_changed();
  group_.barrier("the reference swap (every rank's masters swapped)");
  return previous;
}

void Trainer::resume_iteration(const std::string& checkpoint, const TrainingManifest& manifest) {
  if (manifest.step % steps_per_iteration_ == 0) return;  // at an iteration's end: the next one samples anew
  const std::int64_t iteration = manifest.step / steps_per_iteration_;
  const auto path = std::filesystem::path(checkpoint) / kRolloutsFile;
  // A recorded file was checked against its fingerprint as the checkpoint was read (Checkpointer::load).
  if (manifest.rollouts_fingerprint.empty()) {
    fail("checkpoint '{}' is at step {}, in the middle of the online RL loop's iteration {} ({} steps each), but its "
         "manifest records no {} (that iteration's rollouts, which cannot be sampled again){}", checkpoint,
         manifest.step, iteration + 1, steps_per_iteration_, kRolloutsFile, io::previous_checkpoint_hint(checkpoint));
  }
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  std::string records = text.str();
  if (group_.is_root()) {
    spdlog::info("resume: step {} is in the middle of iteration {}: its rollouts come from {}", manifest.step,
                 iteration + 1, path.string());
  }
  use_rollouts(iteration, std::move(records));
}

void Trainer::use_rollouts(std::int64_t iteration, std::string records) {
  std::istringstream in(records);
  auto rollouts = std::make_unique<data::RolloutDataset>(fmt::format("the rollouts of iteration {}", iteration + 1), in,
                                                         model_config_.vocab_size,
                                                         data::parse_reward_scale(settings_.objective.scale_rewards));
  data_->set_rollouts(std::move(rollouts), settings_.data.seed);
  rollouts_ = std::move(records);
}

std::string Trainer::data_description() const {
  return online_ ? online_->describe() : data_->dataset().describe();
}

}  // namespace odc::train
