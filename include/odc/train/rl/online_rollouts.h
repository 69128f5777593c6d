#pragma once
// The sampling half of the online RL loop (rl.prompts): every iteration, rl.group_size
// completions of the next rl.prompts_per_iteration prompts, drawn with the policy's current
// weights on every rank at once (prompt j of the iteration on rank j mod world), scored (a
// built-in verifier on the rank that drew it, or rl.reward_command on rank 0), and gathered into
// one set of rollout records, the same on every rank and in the same order whatever the world
// size: typed rollout records (data/rollouts.h, gathered in binary, never as text), which the
// trainer then trains rl.epochs_per_iteration passes over. The pipeline's steps (reference
// log-probabilities, scoring, records, statistics) are odc-rollout's (rollout/rollout_pipeline.h).
//
// Reproducible: iteration k's prompts are the k-th slice of the prompts in data.seed's order
// (data.shuffle), and a completion's draws depend only on rl.seed, k, its prompt's position in
// the iteration and its sample index (rollout_sampling.h), so a resumed run samples what the
// straight run did.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "odc/data/prompts.h"
#include "odc/data/rollouts.h"
#include "odc/distributed/group/host_group.h"
#include "odc/model/llama_model.h"
#include "odc/train/rollout/rollout_pipeline.h"
#include "odc/train/rollout/rollout_sampling.h"
#include "odc/train/config/run_settings.h"

namespace odc::train {

struct RolloutIteration {
  std::int64_t iteration = 0;
  std::vector<data::RolloutRecord> records;  // prompt position by prompt position, samples in order
  // reward_mean, reward_std (over all rewards), reward_std_within_groups (the mean of each prompt's
  // group's std: the spread advantages see), groups_equal_rewards (groups whose rewards are all
  // equal: advantage 0), accuracy (reward >= 1), completion_tokens_mean/min/max, eos_fraction
  // (completions that ended with an eos id), stop_fraction (with rl.stop), sample_s (this rank's sampling), reference_s (its
  // reference log-probabilities), score_s (scoring and gathering), rollout_s, completion_tokens_per_s
  nlohmann::json stats;
};

// This rank's share of an iteration, drawn and not yet scored or gathered.
struct DrawnRollouts {
  std::int64_t iteration = 0;
  std::vector<std::int64_t> chosen;     // the iteration's prompts (indices into the prompt set)
  std::vector<std::int64_t> positions;  // per prompt this rank drew: its position in `chosen`
  std::vector<std::vector<std::int32_t>> prompt_ids;  // per prompt this rank drew: its tokens
  std::vector<std::string> prompt_names;             // and its origin ("file:line")
  std::vector<SampledCompletion> completions;  // their `prompt` indexes `positions`
  std::vector<std::vector<float>> ref_logprobs;  // per completion, when a reference scored them
  double sample_s = 0.0;
  double reference_s = 0.0;
};

class OnlineRollouts {
 public:
  // Reads and tokenizes rl.prompts (data.tokenizer, else model.checkpoint's tokenizer.json; with
  // rl.chat as user turns of data.chat_template). The eos ids are model.checkpoint's (and the
  // chat template's end of turn).
  OnlineRollouts(const RunSettings& settings, const model::LlamaConfig& model, int rank, int world_size);

  std::int64_t rollouts_per_iteration() const { return prompts_per_iteration_ * group_size_; }
  // Optimizer steps per iteration: rl.epochs_per_iteration x rollouts / `global_batch`; an
  // odc::Error (naming `origin`, where the global batch came from) when it does not divide, or when
  // it, or the run's steps (rl.iterations x it), is beyond int64.
  std::int64_t steps_per_iteration(std::int64_t global_batch, const std::string& origin) const;
  // The longest sequence a rollout can be: the longest prompt + rl.max_new_tokens (within the
  // model's context).
  std::int64_t max_sequence_length() const;
  std::uint64_t fingerprint() const { return prompts_.fingerprint(); }
  std::string describe() const;

  // This rank's share of iteration `iteration`: its prompts' completions, drawn with `params`
  // (every unit's full weights, unchanged during the call: model::WeightSnapshot), which messages
  // call `policy_name` ("the policy at step 4").
  DrawnRollouts draw(std::int64_t iteration, model::LlamaModel& model, model::ParamSource& params,
                     const std::string& policy_name = "the policy") const;
  // The frozen reference policy's log-probabilities of every drawn completion token (for
  // rl.kl_beta), at rl.temperature, with `reference`'s full weights; sequences packed into forwards
  // of at most `token_cap` tokens.
  void add_reference(DrawnRollouts& drawn, model::LlamaModel& model, model::ParamSource& reference,
                     std::int64_t token_cap) const;
  // Collective: every rank's share scored and gathered into the iteration's records. rl.reward_command
  // runs on rank 0 for at most rl.reward_timeout_s, and stops when rank 0's `stop_requested` says
  // so: then every rank returns std::nullopt (the iteration's rollouts dropped); its failure is an
  // odc::Error on every rank.
  std::optional<RolloutIteration> gather(DrawnRollouts drawn, distributed::HostGroup& group,
                                         const std::function<bool()>& stop_requested = {}) const;
  // draw, then gather (no reference, no stop).
  RolloutIteration sample(std::int64_t iteration, model::LlamaModel& model, model::ParamSource& params,
                          distributed::HostGroup& group) const {
    return *gather(draw(iteration, model, params), group);
  }

 private:
  // The prompts of iteration `iteration`, as indices into prompts_.
  std::vector<std::int64_t> iteration_prompts(std::int64_t iteration) const;

  RlLoopSettings rl_;
  double temperature_ = 1.0;
  std::uint64_t order_seed_ = 0;
  bool shuffle_ = true;
  int rank_ = 0;
  int world_ = 1;
  std::int64_t prompts_per_iteration_ = 0;
  std::int64_t group_size_ = 0;
  std::int64_t context_ = 0;  // the model's max_position_embeddings
  data::PromptSet prompts_;
  std::vector<std::int32_t> eos_;
  std::string scratch_;       // where rl.reward_command's files go
  std::string window_origin_;  // where the model's attention window comes from, for messages
};

}  // namespace odc::train
