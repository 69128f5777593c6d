#pragma once
// RL rollouts (data.format rollouts): one JSONL record per sampled completion,
//   {"prompt_ids": [...], "completion_ids": [...], "logprobs": [...], "ref_logprobs": [...],
//    "reward": 1.0, "group": 7, "temperature": 1.0}  or "advantage": 0.53 instead of reward/group
// prompt_ids (at least one token) and completion_ids are token ids; logprobs holds, per completion
// token, the log-probability with which the sampling policy drew it (the "old" policy of the
// clipped objective); ref_logprobs (optional: on every record or none) the frozen reference
// policy's, for the KL penalty; temperature (optional: the same on every record) the softmax
// temperature the completions were sampled and logprobs computed at. The sequence trained is
// prompt + completion, with the completion's tokens as the only targets.
//
// Advantages: a record gives its own, or a reward and a group id (a prompt's G completions share
// one); then A = (reward - mean of its group) / (std + 1e-4) with `scale` group (std of the group,
// Bessel-corrected), batch (std of all rewards of the file) or none (A = reward - group mean,
// unscaled), as TRL's GRPOTrainer computes them (scale_rewards). A group of one record is refused:
// it has no spread, so its advantage would be 0 and it would train nothing. Every problem is an
// odc::Error naming "file:line".
#include <cstdint>
#include <istream>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "odc/data/dataset.h"

namespace odc::data {

enum class RewardScale { group, batch, none };
RewardScale parse_reward_scale(const std::string& name);  // odc::Error naming the choices

// Group-relative advantages of `rewards` (groups[i]: record i's group), as described above,
// computed in units of each group's (and, for batch, the file's) largest |reward|, so that no square
// overflows: rewards of 1e200 and 0, or +-1e308, get the advantages small ones in the same ratios
// get (with `none` the unscaled difference, which may be beyond float: the reader refuses it).
std::vector<double> group_advantages(const std::vector<double>& rewards, const std::vector<std::int64_t>& groups,
                                     RewardScale scale);

// How rewards spread, for the logs (computed as group_advantages does, without overflow).
struct RewardSpread {
  double mean = 0.0;
  double std = 0.0;                // over all rewards (n in the denominator): not what advantages see
  double std_within_groups = 0.0;  // the mean over groups of each group's std (Bessel; TRL's reward_std)
  std::int64_t groups = 0;
  std::int64_t equal_groups = 0;   // groups whose rewards are all equal: their advantages are 0
};
RewardSpread reward_spread(const std::vector<double>& rewards, const std::vector<std::int64_t>& groups);

// One rollout record, typed: what a sampler hands to training within a process (the online RL
// loop) and what rollout_record_line writes where records cross a process or a checkpoint.
struct RolloutRecord {
  std::vector<std::int32_t> prompt_ids;
  std::vector<std::int32_t> completion_ids;
  std::vector<float> logprobs;                      // per completion token
  std::optional<std::vector<float>> ref_logprobs;   // per completion token, with a reference
  double reward = 0.0;
  std::int64_t group = 0;
  std::optional<double> temperature;
};
// Its JSONL line (with the newline): the record's fields, as RolloutDataset reads them back.
std::string rollout_record_line(const RolloutRecord& record);
std::string rollout_records_jsonl(std::span<const RolloutRecord> records);

class RolloutDataset final : public InMemoryTokenDataset {
 public:
  RolloutDataset(const std::string& path, std::int64_t vocab_size, RewardScale scale = RewardScale::group,
                 bool ignore_extra_fields = false);
  // The same records from a stream (the online loop's, in memory), named `name` in messages.
  RolloutDataset(const std::string& name, std::istream& records, std::int64_t vocab_size,
                 RewardScale scale = RewardScale::group, bool ignore_extra_fields = false);
  // The same from typed records in memory (no text), named `name` ("name:N" is record N).
  RolloutDataset(const std::string& name, std::span<const RolloutRecord> records, std::int64_t vocab_size,
                 RewardScale scale = RewardScale::group);
  std::string describe() const override;
  std::optional<PolicyView> policy(std::int64_t index) const override;
  // A rollout's targets are its completion's tokens (it has no loss_mask): says which are empty.
  std::string no_targets_reason(std::int64_t count) const override;
  // Reward statistics of the file (0 when the records carry advantages).
  double reward_mean() const { return reward_mean_; }
  bool has_ref_logprobs() const { return has_ref_; }
  // The records' sampling temperature, when they say it.
  std::optional<double> temperature() const { return temperature_; }

 private:
  struct Pending;  // what the advantages are computed from once every record is in
  void read(std::istream& in, std::int64_t vocab_size, RewardScale scale, bool ignore_extra_fields);
  // One record, its fields checked: a reward (with its group) or an advantage.
  void add(Pending& pending, const std::vector<std::int32_t>& prompt, const std::vector<std::int32_t>& completion,
           const std::vector<float>& logprobs, const std::vector<float>* ref, std::optional<double> reward,
           std::int64_t group, std::optional<double> advantage, std::optional<double> temperature,
           const std::string& where, std::int64_t line_number);
  void finish(Pending& pending, RewardScale scale);
  std::vector<std::int64_t> starts_;  // per record: its first token in tokens_ (and in logprobs_)
  std::vector<float> logprobs_;       // per token (0 on prompt tokens)
  std::vector<float> ref_logprobs_;   // per token, or empty
  std::vector<float> advantages_;     // per record
  std::vector<std::uint8_t> rewards_differ_;  // per record: its group's rewards are not all equal
  bool has_ref_ = false;
  double reward_mean_ = 0.0;
  std::optional<double> temperature_;
};

}  // namespace odc::data
