#include "odc/train/rl/online_rl_loop.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <spdlog/spdlog.h>

#include "odc/core/error.h"
#include "odc/core/hash.h"
#include "odc/io/native_checkpoint.h"
#include "odc/model/weight_snapshot.h"
#include "odc/train/checkpoint/starting_weights.h"
#include "odc/train/run/trainer.h"

namespace odc::train {

OnlineRlLoop::OnlineRlLoop(const RunSettings& settings, const model::LlamaConfig& model, int rank, int world)
    : settings_(settings), model_(model), rollouts_(settings, model, rank, world) {}

StepSourceFactory OnlineRlLoop::factory() {
  return [](const RunSettings& settings, const model::LlamaConfig& model, int rank, int world) {
    return std::make_unique<OnlineRlLoop>(settings, model, rank, world);
  };
}

std::int64_t OnlineRlLoop::steps(std::int64_t global_batch, const std::string& origin) {
  steps_per_iteration_ = rollouts_.steps_per_iteration(global_batch, origin);
  return settings_.rl.iterations * steps_per_iteration_;
}

void OnlineRlLoop::start(Trainer& trainer, const InitialState& initial, const std::string& checkpoint) {
  // Mid-iteration: its rollouts (else the next iteration samples anew).
  if (initial.resumed) resume_iteration(trainer, checkpoint, *initial.resumed);
  if (settings_.objective.policy.kl_beta <= 0) return;
  // rl.kl_beta: the KL penalty's frozen reference, the weights the run started from
  // (model.checkpoint's or model.seed's), this rank's shard of them.
  if (settings_.model.checkpoint.empty() && initial.resumed && initial.resumed->imported()) {
    fail("rl.kl_beta in the online RL loop keeps the weights the run started from as the reference, but they came "
         "from an imported checkpoint ({}); set model.checkpoint to them", initial.resumed->imported_from);
  }
  reference_ = starting_weights(trainer.store().layout(), trainer.model().units(), model_, settings_.model.seed,
                                settings_.model.checkpoint);
}

bool OnlineRlLoop::before_step(Trainer& trainer, std::int64_t step, const StopSignals* signals) {
  if (step % steps_per_iteration_ != 0 || sampled_for_ == step) return true;
  return begin_iteration(trainer, step, signals);
}

bool OnlineRlLoop::begin_iteration(Trainer& trainer, std::int64_t step, const StopSignals* signals) {
  const std::int64_t iteration = step / steps_per_iteration_;
  sampled_for_ = step;
  distributed::HostGroup& group = trainer.group();
  backend::Backend& backend = trainer.backend();
  model::LlamaModel& model = trainer.model();
  distributed::Comm& comm = trainer.comm();
  model.set_tracer(nullptr);
  comm.set_tracer(nullptr);
  // Every unit's full weights, once, through the comm (the same acquires on every rank, so a
  // collective comm's lockstep holds); then thousands of decode forwards fetch nothing.
  // The compute copies a one-rank backend keeps are keyed by the pointers it computed on: dropped
  // when a snapshot comes and when it goes, so its copies reuse the masters' storage and none are
  // left keyed by a freed snapshot's addresses (Backend::forget_weight_copies).
  const auto snapshot = [&](const char* what) {
    backend.forget_weight_copies();
    group.announce(fmt::format("iteration {}: gathering the {} weights", iteration + 1, what));
    comm.begin_minibatch();
    auto weights = std::make_unique<model::WeightSnapshot>(backend, model.units(), comm);
    comm.end_minibatch();
    return weights;
  };
  DrawnRollouts drawn;
  {
    const auto policy = snapshot("policy");
    group.announce(fmt::format("iteration {}: sampling rollouts", iteration + 1));
    drawn = rollouts_.draw(iteration, model, *policy, fmt::format("the policy at step {}", step));
  }
  backend.forget_weight_copies();  // compute copies made of a snapshot's weights go with it
  if (!reference_.empty()) {
    // The frozen reference is sharded like the policy: its shards take the masters' place while
    // the comm gathers them, then the policy's return.
    reference_ = swap_masters(trainer, std::move(reference_));
    auto reference = snapshot("reference");
    reference_ = swap_masters(trainer, std::move(reference_));
    group.announce(fmt::format("iteration {}: reference log-probabilities", iteration + 1));
    rollouts_.add_reference(drawn, model, *reference, trainer.token_cap());
    reference.reset();
    backend.forget_weight_copies();
  }
  group.announce(fmt::format("iteration {}: scoring and gathering the rollouts", iteration + 1));
  auto sampled = rollouts_.gather(std::move(drawn), group, [signals] { return signals != nullptr && signals->requested(); });
  if (!sampled) {
    if (group.is_root()) {
      spdlog::warn("stop requested ({}) while rl.reward_command scored iteration {}: the command and every process it "
                   "started were killed and the iteration's rollouts dropped (a resume samples it anew); the run ends "
                   "as at a stop after a step", signals->describe(), iteration + 1);
    }
    return false;
  }
  sampled->stats["step"] = step + 1;  // the first step that trains on them
  trainer.record_rollouts(sampled->stats);
  records_ = std::move(sampled->records);
  resumed_records_.clear();
  trainer.train_on(std::make_unique<data::RolloutDataset>(
      fmt::format("the rollouts of iteration {}", iteration + 1), records_, model_.vocab_size,
      data::parse_reward_scale(settings_.objective.scale_rewards)));
  return true;
}

std::vector<float> OnlineRlLoop::swap_masters(Trainer& trainer, std::vector<float> weights) {
  distributed::HostGroup& group = trainer.group();
  group.barrier("the reference swap (every rank done reading the masters)");
  distributed::ShardStore& s = trainer.store();
  s.pull_to_host();
  const std::span<float> masters = s.host_masters();
  ODC_CHECK(weights.size() == masters.size(), "swap_masters: {} weights for {} masters", weights.size(), masters.size());
  std::vector<float> previous(masters.begin(), masters.end());
  std::copy(weights.begin(), weights.end(), masters.begin());
  s.push_to_device();
  trainer.backend().weights_changed();
  group.barrier("the reference swap (every rank's masters swapped)");
  return previous;
}

void OnlineRlLoop::resume_iteration(Trainer& trainer, const std::string& checkpoint, const TrainingManifest& manifest) {
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
  resumed_records_ = text.str();
  records_.clear();
  if (trainer.group().is_root()) {
    spdlog::info("resume: step {} is in the middle of iteration {}: its rollouts come from {}", manifest.step,
                 iteration + 1, path.string());
  }
  std::istringstream records(resumed_records_);
  trainer.train_on(std::make_unique<data::RolloutDataset>(
      fmt::format("the rollouts of iteration {}", iteration + 1), records, model_.vocab_size,
      data::parse_reward_scale(settings_.objective.scale_rewards)));
}

void OnlineRlLoop::checkpoint(std::int64_t step, TrainingManifest& manifest,
                              std::vector<std::pair<std::string, std::string>>& files) const {
  if (step % steps_per_iteration_ == 0) return;
  // In the middle of an iteration: its rollouts, which a resume trains on (they cannot be sampled
  // again: the weights that sampled them are gone).
  std::string records = records_.empty() ? resumed_records_ : data::rollout_records_jsonl(records_);
  manifest.rollouts_fingerprint = fingerprint_hex(fnv1a64(records));
  files.emplace_back(kRolloutsFile, std::move(records));
}

}  // namespace odc::train
