#pragma once
// The objective (train.objective) and the rl.* keys, declared once (core/key.h), in a file of their
// own so that they can move with the rl room.
#include <cstdint>
#include <string>
#include "odc/core/key.h"
#include "odc/kernels/policy_loss.h"

namespace odc::keys {

inline const Key<std::string> train_objective{"train.objective", "sft", "what the model is trained to do: sft = weighted cross-entropy on the targets (train.loss_reduction); "
              "grpo = the clipped policy-gradient objective on rollouts (data.format rollouts; the rl.* keys)", {"sft", "grpo"}};
inline const Key<double> rl_epsilon{"rl.epsilon", number("0.2"), "grpo: the ratio's lower clip bound is 1 - epsilon (and the upper 1 + epsilon unless rl.epsilon_high)", Range::at_least(0).and_below(1)};
inline const Key<double> rl_epsilon_high = Key<double>::unset("rl.epsilon_high", "grpo: the ratio's upper clip bound is 1 + epsilon_high (unset: rl.epsilon; DAPO's clip-higher sets it "
              "above)", Range::at_least(0));
inline const Key<double> rl_kl_beta{"rl.kl_beta", number("0"), "grpo: weight of the KL penalty to the reference policy (k3 estimator over the records' "
              "ref_logprobs; 0 = none)", Range::at_least(0)};
inline const Key<bool> rl_kl_ratio_weighted{"rl.kl_ratio_weighted", true, "grpo with rl.kl_beta: the penalty's k3 estimate weighted by the importance ratio r (the unbiased "
              "reverse-KL gradient of DeepSeek-V3.2; TRL's use_bias_correction_kl, on by default there too); false "
              "= plain k3"};
inline const Key<double> rl_temperature{"rl.temperature", number("1"), "grpo: the policy's softmax temperature: log-probabilities, entropy and gradient of softmax(logits / T), "
              "as the rollouts were sampled (records that say their temperature must match it)", Range::above(0)};
inline const Key<std::string> rl_loss_aggregation{"rl.loss_aggregation", "dapo", "grpo: how token losses add up over the global minibatch: grpo = mean over sequences of each "
              "sequence's mean; dapo = mean over all completion tokens; dr_grpo = sum over tokens / (sequences x "
              "rl.max_completion_length)", {"grpo", "dapo", "dr_grpo"}};
inline const Key<std::int64_t> rl_max_completion_length{"rl.max_completion_length", 0, "grpo with rl.loss_aggregation dr_grpo: the constant normaliser's length (the sampler's max new "
              "tokens); 0 = the longest completion of the data", Range::at_least(0)};
inline const Key<std::string> rl_scale_rewards{"rl.scale_rewards", "group", "grpo on records with rewards: advantage = (reward - group mean) / (std + 1e-4) with the std of the "
              "group, of the whole file (batch), or not scaled (none)", {"group", "batch", "none"}};
inline const Key<bool> rl_entropy{"rl.entropy", true, "grpo: measure the policy's mean token entropy on the completions every step (a metric; on a GPU the "
              "logits rows cross to the host for it)"};
inline const Key<std::string> rl_prompts{"rl.prompts", std::string(), "grpo's online loop: a prompts JSONL ({\"prompt\": TEXT, \"answer\": TEXT} per line) that the policy "
              "samples from every iteration with its current weights (no data.train); empty = offline, rollout records "
              "from data.train"};
inline const Key<std::int64_t> rl_iterations{"rl.iterations", 1, "online loop: iterations of sample, score, train (the run's length: iterations x "
              "rl.epochs_per_iteration x rollouts / data.global_batch_size steps)", Range::at_least(1)};
inline const Key<std::int64_t> rl_prompts_per_iteration{"rl.prompts_per_iteration", 8, "online loop: prompts sampled per iteration (the next ones of rl.prompts in data.seed's order)", Range::at_least(1)};
inline const Key<std::int64_t> rl_group_size{"rl.group_size", 4, "online loop: completions per prompt (GRPO's G; a group of one has no spread: advantage 0)", Range::at_least(2)};
inline const Key<std::int64_t> rl_epochs_per_iteration{"rl.epochs_per_iteration", 1, "online loop: passes over each iteration's rollouts (TRL's num_iterations)", Range::at_least(1)};
inline const Key<std::int64_t> rl_max_new_tokens{"rl.max_new_tokens", 64, "online loop: the most tokens of a completion", Range::at_least(1)};
inline const Key<double> rl_top_p{"rl.top_p", number("1"), "online loop: nucleus sampling mass", Range::above(0).and_at_most(1)};
inline const Key<std::int64_t> rl_top_k{"rl.top_k", 0, "online loop: sample among the k most likely tokens (0 = all)", Range::at_least(0)};
inline const Key<std::string> rl_stop{"rl.stop", std::string(), "online loop: a completion also ends once its text contains this string (the token that completes it "
              "is kept); empty = eos ids and rl.max_new_tokens only"};
inline const Key<std::int64_t> rl_seed{"rl.seed", 0, "online loop: sampling seed; a completion's draws depend only on it, the iteration, its prompt's "
              "position and its sample index", Range::at_least(0)};
inline const Key<std::int64_t> rl_concurrency{"rl.concurrency", 16, "online loop: sequences each rank decodes at once", Range::at_least(1)};
inline const Key<std::string> rl_verifier{"rl.verifier", "exact", "online loop: how a completion is scored against its prompt's answer (rewards.h): exact = the "
              "completion up to its end-of-turn marker, stripped, equals the answer; number = its last number does", {"exact", "number"}};
inline const Key<std::string> rl_reward_command{"rl.reward_command", std::string(), "online loop: score with this shell command instead of rl.verifier: JSONL {\"prompt\", \"completion\", "
              "\"answer\"} on its stdin, one reward per line on its stdout (run by rank 0)"};
inline const Key<double> rl_reward_timeout_s{"rl.reward_timeout_s", number("300"), "online loop: rl.reward_command's time limit per iteration; past it the command and every process "
              "it started are killed and the run fails naming it", Range::above(0)};
inline const Key<bool> rl_chat{"rl.chat", false, "online loop: render each prompt as a user turn of data.chat_template for generation"};

}  // namespace odc::keys

namespace odc::keys {

// The policy loss's parameters as the rl.* keys' defaults set them (rl.epsilon_high unset: rl.epsilon).
inline kernels::PolicyLossParams default_policy_loss() {
  kernels::PolicyLossParams policy;
  policy.clip_low = rl_epsilon.default_value();
  policy.clip_high = rl_epsilon.default_value();
  policy.kl_beta = rl_kl_beta.default_value();
  policy.kl_ratio_weighted = rl_kl_ratio_weighted.default_value();
  policy.temperature = rl_temperature.default_value();
  return policy;
}

}  // namespace odc::keys
