#include "odc/train/rollout/rollout_pipeline.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "odc/core/error.h"
#include "odc/model/batch.h"
#include "odc/train/rollout/inference.h"

namespace odc::train {

std::vector<std::vector<float>> reference_logprobs(model::LlamaModel& model, model::ParamSource& reference,
                                                   std::span<const SampledCompletion> completions,
                                                   std::span<const std::vector<std::int32_t>> prompts,
                                                   std::span<const std::string> prompt_names,
                                                   const ReferenceOptions& options) {
  const auto vocab = static_cast<std::size_t>(model.config().vocab_size);
  std::vector<std::vector<float>> out(completions.size());
  model::PackedBatch batch;
  std::vector<std::size_t> members;  // completions in the batch
  std::vector<float> logits;
  const auto prompt_of = [&](const SampledCompletion& c) -> const std::vector<std::int32_t>& {
    return prompts[static_cast<std::size_t>(c.prompt)];
  };
  const auto run = [&] {
    if (members.empty()) return;
    if (options.before_forward) options.before_forward();
    model.forward(batch, reference, &logits);
    std::size_t offset = 0;
    for (const std::size_t i : members) {
      const auto& c = completions[i];
      const std::size_t prompt = prompt_of(c).size();
      auto& row_logprobs = out[i];
      for (std::size_t t = 0; t < c.ids.size(); ++t) {
        const std::span<const float> row(logits.data() + (offset + prompt + t - 1) * vocab, vocab);
        if (const std::size_t bad = first_non_finite(row); bad < vocab) {
          fail("{} gives a logit that is not finite ({} for token {}) after position {} of {}'s completion {}{}",
               options.model_name, row[bad], bad, prompt + t - 1, prompt_names[static_cast<std::size_t>(c.prompt)],
               c.sample, options.overflow_note);
        }
        row_logprobs.push_back(static_cast<float>(token_logprob(row, c.ids[t], options.temperature)));
      }
      offset += prompt + c.ids.size();
    }
    batch.clear();
    members.clear();
  };
  std::vector<std::int32_t> sequence;
  for (std::size_t i = 0; i < completions.size(); ++i) {
    const auto& c = completions[i];
    sequence = prompt_of(c);
    sequence.insert(sequence.end(), c.ids.begin(), c.ids.end());
    if (batch.num_tokens() + static_cast<std::int64_t>(sequence.size()) > options.token_cap) run();
    batch.append(sequence.data(), nullptr, static_cast<std::int64_t>(sequence.size()), 0.0f);
    members.push_back(i);
  }
  run();
  return out;
}

std::optional<std::vector<double>> score_completions(const Scorer& scorer, std::span<const std::string> completions,
                                                     std::span<const data::Prompt* const> prompts) {
  ODC_CHECK(completions.size() == prompts.size(), "score_completions: {} completions for {} prompts",
            completions.size(), prompts.size());
  if (scorer.command) {
    std::vector<nlohmann::json> requests;
    for (std::size_t i = 0; i < completions.size(); ++i) {
      requests.push_back({{"prompt", prompts[i]->text}, {"completion", completions[i]}, {"answer", prompts[i]->answer}});
    }
    return command_rewards(*scorer.command, requests);
  }
  std::vector<double> rewards;
  for (std::size_t i = 0; i < completions.size(); ++i) {
    rewards.push_back(reward_of(scorer.verifier, completions[i], prompts[i]->answer));
  }
  return rewards;
}

data::RolloutRecord rollout_record(const std::vector<std::int32_t>& prompt_ids, std::vector<std::int32_t> completion_ids,
                                   std::vector<float> logprobs, double reward, std::int64_t group, double temperature,
                                   std::optional<std::vector<float>> ref_logprobs) {
  data::RolloutRecord r;
  r.prompt_ids = prompt_ids;
  r.completion_ids = std::move(completion_ids);
  r.logprobs = std::move(logprobs);
  r.ref_logprobs = std::move(ref_logprobs);
  r.reward = reward;
  r.group = group;
  r.temperature = temperature;
  return r;
}

RolloutStats rollout_stats(std::span<const data::RolloutRecord> records, std::span<const std::uint8_t> eos,
                           std::span<const std::uint8_t> stopped) {
  RolloutStats s;
  s.count = records.size();
  double correct = 0.0, ended = 0.0, stops = 0.0;
  std::vector<double> rewards;
  std::vector<std::int64_t> groups;
  std::size_t shortest = static_cast<std::size_t>(-1), longest = 0;
  for (std::size_t i = 0; i < records.size(); ++i) {
    const auto& r = records[i];
    rewards.push_back(r.reward);
    groups.push_back(r.group);
    s.reward_sum += r.reward;
    correct += r.reward >= 1.0 ? 1.0 : 0.0;
    const std::size_t length = r.completion_ids.size();
    s.tokens += static_cast<double>(length);
    shortest = std::min(shortest, length);
    longest = std::max(longest, length);
    if (i < eos.size()) ended += eos[i] != 0 ? 1.0 : 0.0;
    if (i < stopped.size()) stops += stopped[i] != 0 ? 1.0 : 0.0;
  }
  const auto n = static_cast<double>(records.size());
  s.spread = data::reward_spread(rewards, groups);
  s.accuracy = correct / n;
  s.shortest = shortest;
  s.longest = longest;
  s.eos_fraction = ended / n;
  s.stop_fraction = stops / n;
  return s;
}

}  // namespace odc::train
