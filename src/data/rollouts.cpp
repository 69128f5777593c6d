#include "odc/data/rollouts.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <ranges>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "odc/core/error.h"
#include "jsonl_records.h"
#include "record_fields.h"

namespace odc::data {

using nlohmann::json;

RewardScale parse_reward_scale(const std::string& name) {
  if (name == "group") return RewardScale::group;
  if (name == "batch") return RewardScale::batch;
  if (name == "none") return RewardScale::none;
  fail("rl.scale_rewards: unknown value '{}' (choices: group, batch, none)", name);
}

namespace {

// Mean and spread of rewards computed in units of their largest magnitude: no square overflows
// (1e200 beside 0, or +-1e308, have a finite spread there; in plain units the squares were inf and
// every advantage 0), and the scale is kept apart to undo it where the result is finite.
struct Spread {
  double scale = 0.0;  // max |reward|; 0: every reward 0
  double mean = 0.0;   // of reward / scale
  double std = 0.0;    // of reward / scale, Bessel-corrected; NaN for a single value
  double population_std = 0.0;  // of reward / scale, over n
  std::int64_t count = 0;
};

template <typename Indices>
Spread spread_of(const std::vector<double>& rewards, const Indices& indices) {
  Spread s;
  for (const auto i : indices) {
    s.scale = std::max(s.scale, std::fabs(rewards[static_cast<std::size_t>(i)]));
    ++s.count;
  }
  if (s.scale == 0.0) {
    if (s.count < 2) s.std = std::numeric_limits<double>::quiet_NaN();
    return s;
  }
  for (const auto i : indices) s.mean += rewards[static_cast<std::size_t>(i)] / s.scale;
  s.mean /= static_cast<double>(s.count);
  double squares = 0.0;  // two passes: about the mean, which no cancellation can spoil
  for (const auto i : indices) {
    const double d = rewards[static_cast<std::size_t>(i)] / s.scale - s.mean;
    squares += d * d;
  }
  s.population_std = std::sqrt(squares / static_cast<double>(s.count));
  s.std = s.count > 1 ? std::sqrt(squares / static_cast<double>(s.count - 1))
                      : std::numeric_limits<double>::quiet_NaN();
  return s;
}

std::map<std::int64_t, std::vector<std::size_t>> members_by_group(const std::vector<std::int64_t>& groups) {
  std::map<std::int64_t, std::vector<std::size_t>> by_group;
  for (std::size_t i = 0; i < groups.size(); ++i) by_group[groups[i]].push_back(i);
  return by_group;
}

std::vector<std::int32_t> token_array(const json& record, const char* key, std::int64_t vocab, const std::string& where) {
  const auto it = record.find(key);
  if (it == record.end()) fail("{}: missing \"{}\" (a rollout record: prompt_ids, completion_ids, logprobs, reward and group, or advantage)", where, key);
  if (!it->is_array()) fail("{}: \"{}\" must be an array of token ids, found {}", where, key, it->type_name());
  std::vector<std::int32_t> out;
  for (std::size_t j = 0; j < it->size(); ++j) {
    const json& v = (*it)[j];
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() >= vocab) {
      fail("{}: {}[{}] = {} is not a token id in [0, {})", where, key, j, v.dump(), vocab);
    }
    out.push_back(static_cast<std::int32_t>(v.get<std::int64_t>()));
  }
  return out;
}

std::vector<float> logprob_array(const json& record, const char* key, std::size_t expected, const std::string& where) {
  const json& a = record.at(key);
  if (!a.is_array()) fail("{}: \"{}\" must be an array of log-probabilities, found {}", where, key, a.type_name());
  if (a.size() != expected) {
    fail("{}: \"{}\" has {} values but \"completion_ids\" has {} tokens (one log-probability per completion token)",
         where, key, a.size(), expected);
  }
  std::vector<float> out;
  for (std::size_t j = 0; j < a.size(); ++j) {
    if (!a[j].is_number() || !std::isfinite(a[j].get<double>()) || a[j].get<double>() > 0.0) {
      fail("{}: {}[{}] = {} is not a log-probability (a finite number <= 0)", where, key, j, a[j].dump());
    }
    out.push_back(a[j].get<float>());
  }
  return out;
}

double finite_number(const json& record, const char* key, const std::string& where) {
  const json& v = record.at(key);
  if (!v.is_number() || !std::isfinite(v.get<double>())) fail("{}: \"{}\" must be a finite number, found {}", where, key, v.dump());
  return v.get<double>();
}

}  // namespace

std::vector<double> group_advantages(const std::vector<double>& rewards, const std::vector<std::int64_t>& groups,
                                     RewardScale scale) {
  ODC_CHECK(rewards.size() == groups.size(), "group_advantages: {} rewards, {} groups", rewards.size(), groups.size());
  const Spread all = spread_of(rewards, std::views::iota(std::size_t{0}, rewards.size()));
  std::vector<double> out(rewards.size(), 0.0);
  for (const auto& [group, members] : members_by_group(groups)) {
    const Spread g = spread_of(rewards, members);
    if (g.scale == 0.0) continue;  // every reward 0: no deviation
    for (const std::size_t i : members) {
      const double deviation = rewards[i] / g.scale - g.mean;  // in units of g.scale
      double a = 0.0;
      if (scale == RewardScale::none) {
        a = deviation * g.scale;
      } else if (scale == RewardScale::group) {
        a = deviation / (g.std + 1e-4 / g.scale);  // (reward - mean) / (std + 1e-4), both sides over g.scale
      } else {
        a = (g.scale / all.scale) * deviation / (all.std + 1e-4 / all.scale);
      }
      out[i] = std::isnan(a) ? 0.0 : a;  // a lone sample: no spread, no signal
    }
  }
  return out;
}

RewardSpread reward_spread(const std::vector<double>& rewards, const std::vector<std::int64_t>& groups) {
  ODC_CHECK(rewards.size() == groups.size() && !rewards.empty(), "reward_spread: {} rewards, {} groups", rewards.size(),
            groups.size());
  const Spread all = spread_of(rewards, std::views::iota(std::size_t{0}, rewards.size()));
  RewardSpread out;
  out.mean = all.scale * all.mean;
  out.std = all.scale * all.population_std;
  for (const auto& [group, members] : members_by_group(groups)) {
    const Spread g = spread_of(rewards, members);
    ++out.groups;
    const bool equal = g.count < 2 || g.scale == 0.0 || g.std == 0.0;
    if (equal) ++out.equal_groups;
    out.std_within_groups += equal ? 0.0 : g.scale * g.std;
  }
  out.std_within_groups /= static_cast<double>(out.groups);
  return out;
}

std::string rollout_record_line(const RolloutRecord& r) {
  json record = {{"prompt_ids", r.prompt_ids}, {"completion_ids", r.completion_ids}, {"logprobs", r.logprobs},
                 {"reward", r.reward},         {"group", r.group}};
  if (r.temperature) record["temperature"] = *r.temperature;
  if (r.ref_logprobs) record["ref_logprobs"] = *r.ref_logprobs;
  return record.dump() + "\n";
}

std::string rollout_records_jsonl(std::span<const RolloutRecord> records) {
  std::string out;
  for (const auto& r : records) out += rollout_record_line(r);
  return out;
}

RolloutDataset::RolloutDataset(const std::string& path, std::int64_t vocab_size, RewardScale scale,
                               bool ignore_extra_fields)
    : InMemoryTokenDataset(path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open the rollouts file (data.format rollouts: JSONL rollout records)", path);
  read(in, vocab_size, scale, ignore_extra_fields);
}

RolloutDataset::RolloutDataset(const std::string& name, std::istream& records, std::int64_t vocab_size,
                               RewardScale scale, bool ignore_extra_fields)
    : InMemoryTokenDataset(name) {
  read(records, vocab_size, scale, ignore_extra_fields);
}

struct RolloutDataset::Pending {
  std::vector<double> rewards;
  std::vector<std::int64_t> groups;
  std::vector<float> given;  // per record: its own advantage
  std::optional<bool> with_reward;
};

namespace {

void check_vocab(const std::string& path, std::int64_t vocab_size) {
  if (vocab_size <= 0 || vocab_size > std::numeric_limits<std::int32_t>::max()) {
    fail("{}: vocab size must be in [1, {}], got {}", path, std::numeric_limits<std::int32_t>::max(), vocab_size);
  }
}

// The checks token_array and logprob_array make of JSON, made of typed values.
void check_tokens(const std::vector<std::int32_t>& ids, const char* key, std::int64_t vocab, const std::string& where) {
  for (std::size_t j = 0; j < ids.size(); ++j) {
    if (ids[j] < 0 || ids[j] >= vocab) fail("{}: {}[{}] = {} is not a token id in [0, {})", where, key, j, ids[j], vocab);
  }
}

void check_logprobs(const std::vector<float>& values, const char* key, std::size_t expected, const std::string& where) {
  if (values.size() != expected) {
    fail("{}: \"{}\" has {} values but \"completion_ids\" has {} tokens (one log-probability per completion token)",
         where, key, values.size(), expected);
  }
  for (std::size_t j = 0; j < values.size(); ++j) {
    if (!std::isfinite(values[j]) || values[j] > 0.0f) {
      fail("{}: {}[{}] = {} is not a log-probability (a finite number <= 0)", where, key, j, values[j]);
    }
  }
}

}  // namespace

RolloutDataset::RolloutDataset(const std::string& name, std::span<const RolloutRecord> records,
                               std::int64_t vocab_size, RewardScale scale)
    : InMemoryTokenDataset(name) {
  check_vocab(name, vocab_size);
  Pending pending;
  std::int64_t number = 0;
  for (const RolloutRecord& r : records) {
    ++number;
    const std::string where = fmt::format("{}:{}", name, number);
    check_tokens(r.prompt_ids, "prompt_ids", vocab_size, where);
    check_tokens(r.completion_ids, "completion_ids", vocab_size, where);
    check_logprobs(r.logprobs, "logprobs", r.completion_ids.size(), where);
    if (r.ref_logprobs) check_logprobs(*r.ref_logprobs, "ref_logprobs", r.completion_ids.size(), where);
    if (!std::isfinite(r.reward)) fail("{}: \"reward\" must be a finite number, found {}", where, r.reward);
    if (r.temperature && !std::isfinite(*r.temperature)) {
      fail("{}: \"temperature\" must be a finite number, found {}", where, *r.temperature);
    }
    add(pending, r.prompt_ids, r.completion_ids, r.logprobs, r.ref_logprobs ? &*r.ref_logprobs : nullptr, r.reward,
        r.group, std::nullopt, r.temperature, where, number);
  }
  finish(pending, scale);
}

void RolloutDataset::read(std::istream& in, std::int64_t vocab_size, RewardScale scale, bool ignore_extra_fields) {
  const std::string& path = this->path();
  check_vocab(path, vocab_size);
  const std::vector<std::string> known{"prompt_ids", "completion_ids", "logprobs", "ref_logprobs", "reward", "group",
                                       "advantage", "temperature"};
  Pending pending;
  read_jsonl_stream(in, path, [&](const nlohmann::json& record, const std::string& where, std::int64_t line_number) {
    if (!record.is_object()) fail("{}: expected a JSON object (a rollout record), found {}", where, record.type_name());
    if (!ignore_extra_fields) refuse_unknown_fields(record, known, where, "a rollout record", kExtraFieldsHint);
    const auto prompt = token_array(record, "prompt_ids", vocab_size, where);
    const auto completion = token_array(record, "completion_ids", vocab_size, where);
    if (prompt.empty()) fail("{}: \"prompt_ids\" is empty (a completion is predicted from at least one prompt token)", where);
    if (!record.contains("logprobs")) fail("{}: missing \"logprobs\" (the sampling policy's log-probability of each completion token)", where);
    const auto logprobs = logprob_array(record, "logprobs", completion.size(), where);
    const bool ref = record.contains("ref_logprobs");
    if (!starts_.empty() && ref != has_ref_) {
      fail("{}: \"ref_logprobs\" is {} here but {} on the records before: give it on every record or on none", where,
           ref ? "present" : "absent", has_ref_ ? "present" : "absent");
    }
    const bool reward = record.contains("reward");
    const bool advantage = record.contains("advantage");
    if (reward == advantage) {
      fail("{}: give either \"reward\" with \"group\" (advantages computed per group) or \"advantage\", {}", where,
           reward ? "not both" : "found neither");
    }
    if (pending.with_reward && *pending.with_reward != reward) {
      fail("{}: this record has {{\"{}\"}} but the ones before have {{\"{}\"}}: one file, one kind", where,
           reward ? "reward" : "advantage", reward ? "advantage" : "reward");
    }
    std::optional<double> reward_value, advantage_value;
    std::int64_t group = 0;
    if (reward) {
      if (!record.contains("group")) fail("{}: \"reward\" needs \"group\" (the id its prompt's completions share)", where);
      const json& g = record.at("group");
      if (!g.is_number_integer()) fail("{}: \"group\" must be an integer id, found {}", where, g.dump());
      reward_value = finite_number(record, "reward", where);
      group = g.get<std::int64_t>();
    } else {
      if (record.contains("group") && !record.at("group").is_number_integer()) {
        fail("{}: \"group\" must be an integer id, found {}", where, record.at("group").dump());
      }
      advantage_value = finite_number(record, "advantage", where);
    }
    std::optional<double> temperature;
    if (record.contains("temperature")) temperature = finite_number(record, "temperature", where);
    std::vector<float> ref_values;
    if (ref) ref_values = logprob_array(record, "ref_logprobs", completion.size(), where);
    add(pending, prompt, completion, logprobs, ref ? &ref_values : nullptr, reward_value, group, advantage_value,
        temperature, where, line_number);
    });
  finish(pending, scale);
}

void RolloutDataset::add(Pending& pending, const std::vector<std::int32_t>& prompt,
                         const std::vector<std::int32_t>& completion, const std::vector<float>& logprobs,
                         const std::vector<float>* ref, std::optional<double> reward, std::int64_t group,
                         std::optional<double> advantage, std::optional<double> temperature, const std::string& where,
                         std::int64_t line_number) {
  if (prompt.empty()) fail("{}: \"prompt_ids\" is empty (a completion is predicted from at least one prompt token)", where);
  if (!starts_.empty() && (ref != nullptr) != has_ref_) {
    fail("{}: \"ref_logprobs\" is {} here but {} on the records before: give it on every record or on none", where,
         ref != nullptr ? "present" : "absent", has_ref_ ? "present" : "absent");
  }
  has_ref_ = ref != nullptr;
  if (pending.with_reward && *pending.with_reward != reward.has_value()) {
    fail("{}: this record has {{\"{}\"}} but the ones before have {{\"{}\"}}: one file, one kind", where,
         reward ? "reward" : "advantage", reward ? "advantage" : "reward");
  }
  pending.with_reward = reward.has_value();
  if (reward) {
    pending.rewards.push_back(*reward);
    pending.groups.push_back(group);
  } else {
    const double a = *advantage;
    if (std::fabs(a) > std::numeric_limits<float>::max()) {
      fail("{}: \"advantage\" {} is beyond the range of a float (the objective computes in float); scale it down",
           where, a);
    }
    pending.given.push_back(static_cast<float>(a));
  }
  if (temperature) {
    const double t = *temperature;
    if (!(t > 0)) fail("{}: \"temperature\" must be > 0, found {}", where, t);
    if (temperature_ && *temperature_ != t) {
      fail("{}: \"temperature\" is {} here but {} on the records before: one file, one sampling temperature", where,
           t, *temperature_);
    }
    temperature_ = t;
  }
  const auto start = total_tokens();
  starts_.push_back(start);
  for (const auto t : prompt) {
    tokens_.push_back(t);
    masks_.push_back(0);
    logprobs_.push_back(0.0f);
  }
  for (std::size_t j = 0; j < completion.size(); ++j) {
    tokens_.push_back(completion[j]);
    masks_.push_back(1);
    logprobs_.push_back(logprobs[j]);
  }
  if (ref != nullptr) {
    ref_logprobs_.insert(ref_logprobs_.end(), prompt.size(), 0.0f);
    ref_logprobs_.insert(ref_logprobs_.end(), ref->begin(), ref->end());
  }
  end_sequence(line_number);
}

void RolloutDataset::finish(Pending& pending, RewardScale scale) {
  const std::string& path = this->path();
  const auto& rewards = pending.rewards;
  const auto& groups = pending.groups;
  if (size() == 0) fail("{}: no rollout records", path);
  if (pending.with_reward.value_or(false)) {
    std::map<std::int64_t, std::int64_t> members;
    for (const auto g : groups) ++members[g];
    for (std::size_t i = 0; i < groups.size(); ++i) {
      if (members[groups[i]] == 1) {
        fail("{}: group {} has this record alone: GRPO's advantage compares a completion with the others of its "
             "group (its reward minus their mean), so a lone completion gets 0 and trains nothing; sample at least "
             "2 completions per prompt (odc-rollout --group, rl.group_size) or give each record its \"advantage\"",
             record(static_cast<std::int64_t>(i)), groups[i]);
      }
    }
    for (const double a : group_advantages(rewards, groups, scale)) {
      const auto i = static_cast<std::int64_t>(advantages_.size());
      if (std::fabs(a) > std::numeric_limits<float>::max()) {
        fail("{}: the advantage of this record, {} (its reward minus its group's mean, unscaled: rl.scale_rewards "
             "none), is beyond the range of a float (the objective computes in float); scale the rewards down or set "
             "rl.scale_rewards: group", record(i), a);
      }
      advantages_.push_back(static_cast<float>(a));
    }
    reward_mean_ = reward_spread(rewards, groups).mean;
    rewards_differ_.assign(rewards.size(), 0);
    for (const auto& [group, in_group] : members_by_group(groups)) {
      const Spread g = spread_of(rewards, in_group);
      if (g.scale != 0.0 && g.std > 0.0) {
        for (const std::size_t i : in_group) rewards_differ_[i] = 1;
      }
    }
  } else {
    advantages_ = std::move(pending.given);
  }
}

std::string RolloutDataset::no_targets_reason(std::int64_t count) const {
  std::int64_t empty = 0;
  for (std::int64_t i = 0; i < count; ++i) {
    const auto begin = masks_.begin() + starts_[static_cast<std::size_t>(i)];
    const auto end = begin + length(i);
    if (std::find(begin, end, std::uint8_t{1}) == end) ++empty;
  }
  if (empty == count) return "every completion_ids is empty: a rollout's targets are its completion's tokens";
  return fmt::format("{} of them have an empty completion_ids, and the other {} a completion of one token with no "
                     "prompt_ids before it (a first token is never predicted)", empty, count - empty);
}

std::string RolloutDataset::describe() const {
  return fmt::format("{} ({} rollouts, {} tokens)", path(), size(), total_tokens());
}

std::optional<PolicyView> RolloutDataset::policy(std::int64_t index) const {
  const auto i = static_cast<std::size_t>(index);
  ODC_CHECK(index >= 0 && index < size(), "rollout {} of {}", index, size());
  const auto start = static_cast<std::size_t>(starts_[i]);
  const auto count = static_cast<std::size_t>(length(index));
  PolicyView view;
  view.logprobs = std::span<const float>(logprobs_).subspan(start, count);
  if (has_ref_) view.ref_logprobs = std::span<const float>(ref_logprobs_).subspan(start, count);
  view.advantage = advantages_[i];
  view.rewards_differ = !rewards_differ_.empty() && rewards_differ_[i] != 0;
  view.temperature = temperature_;
  return view;
}

}  // namespace odc::data
