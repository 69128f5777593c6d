#pragma once
// The rollout pipeline, once for odc-rollout and the online RL loop: completions sampled
// (rollout_sampling.h) -> the frozen reference's log-probabilities -> rewards (a verifier or a
// reward command, rewards.h) -> typed rollout records (data/rollouts.h) -> reward statistics.
// Every step works on typed values in memory; records become JSONL only where they leave the
// process (odc-rollout's output, a checkpoint's rollouts file).
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "odc/data/prompts.h"
#include "odc/data/rollouts.h"
#include "odc/model/llama_model.h"
#include "odc/train/rollout/rewards.h"
#include "odc/train/rollout/rollout_sampling.h"

namespace odc::train {

struct ReferenceOptions {
  double temperature = 1.0;       // of the log-probabilities (the sampling's)
  std::int64_t token_cap = 1;     // sequences packed into forwards of at most this many tokens (1: one each)
  // For the message on a logit that is not finite: "{model} gives a logit ... completion {sample}{note}".
  std::string model_name = "the reference";
  std::string overflow_note = ": its activations overflow";
  std::function<void()> before_forward;  // may be empty; may throw (a stop request)
};

// The reference's log-probability of every token of every completion (prompts[c.prompt] + c.ids,
// `reference`'s full weights), at options.temperature; prompt_names[c.prompt] names a prompt.
std::vector<std::vector<float>> reference_logprobs(model::LlamaModel& model, model::ParamSource& reference,
                                                   std::span<const SampledCompletion> completions,
                                                   std::span<const std::vector<std::int32_t>> prompts,
                                                   std::span<const std::string> prompt_names,
                                                   const ReferenceOptions& options);

// How completions are scored: a built-in verifier, or a reward command.
struct Scorer {
  Verifier verifier = Verifier::exact;
  std::optional<RewardCommand> command;
};
// The reward of completion i (text completions[i]) against prompts[i]'s answer; std::nullopt when
// a stop request stopped the reward command.
std::optional<std::vector<double>> score_completions(const Scorer& scorer, std::span<const std::string> completions,
                                                     std::span<const data::Prompt* const> prompts);

// One record: prompt + completion, their log-probabilities, the reward, the group (its prompt).
data::RolloutRecord rollout_record(const std::vector<std::int32_t>& prompt_ids, std::vector<std::int32_t> completion_ids,
                                   std::vector<float> logprobs, double reward, std::int64_t group, double temperature,
                                   std::optional<std::vector<float>> ref_logprobs);

// The statistics of an iteration's or a file's records (`eos`, `stopped`: per record, how its
// completion ended).
struct RolloutStats {
  data::RewardSpread spread;  // mean, std, within groups, equal groups
  double reward_sum = 0.0;    // in record order
  double accuracy = 0.0;      // rewards >= 1
  double tokens = 0.0;        // completion tokens
  std::size_t shortest = 0, longest = 0;
  double eos_fraction = 0.0, stop_fraction = 0.0;
  std::size_t count = 0;
};
RolloutStats rollout_stats(std::span<const data::RolloutRecord> records, std::span<const std::uint8_t> eos,
                           std::span<const std::uint8_t> stopped);

}  // namespace odc::train
