#include "odc/train/run/online_rollouts.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "odc/core/checked_math.h"
#include "odc/core/error.h"
#include "odc/core/random.h"
#include "odc/data/attention_window.h"
#include "odc/data/packing.h"
#include "odc/data/rollouts.h"
#include "odc/data/text_dataset.h"
#include "odc/train/rollout/inference.h"
#include "odc/train/run/minibatch_source.h"
#include "odc/train/rollout/rewards.h"
#include "odc/train/rollout/rollout_sampling.h"

namespace odc::train {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// A tokenizer for the prompts, or an error saying where one would be.
std::string prompts_tokenizer(const RunSettings& settings) {
  const std::string path = data::resolve_tokenizer_path(settings.data.tokenizer, settings.model.checkpoint);
  if (path.empty() || !std::filesystem::exists(path)) {
    fail("rl.prompts: the prompts are tokenized with data.tokenizer or model.checkpoint's tokenizer.json, but {}; "
         "set data.tokenizer",
         path.empty() ? std::string("neither is set") : fmt::format("'{}' does not exist", path));
  }
  return path;
}

}  // namespace

OnlineRollouts::OnlineRollouts(const RunSettings& settings, const model::LlamaConfig& model, int rank, int world_size)
    : rl_(settings.rl),
      temperature_(settings.objective.policy.temperature),
      order_seed_(settings.data.seed),
      shuffle_(settings.data.shuffle),
      rank_(rank),
      world_(world_size),
      prompts_per_iteration_(settings.rl.prompts_per_iteration),
      group_size_(settings.rl.group_size),
      context_(model.max_position_embeddings),
      prompts_(settings.rl.prompts, prompts_tokenizer(settings),
               settings.rl.chat ? settings.data.chat_template : std::string()) {
  if (!settings.model.checkpoint.empty()) eos_ = eos_token_ids(settings.model.checkpoint);
  for (const auto id : prompts_.end_of_turn()) eos_.push_back(id);
  for (const auto id : eos_) {
    if (id < 0 || id >= model.vocab_size) fail("rl.prompts: eos id {} is outside the vocabulary of {}", id, model.vocab_size);
  }
  for (const auto& p : prompts_.prompts()) {
    for (const auto id : p.ids) {
      if (id < 0 || id >= model.vocab_size) {
        fail("{}: the prompt encodes to token {}, outside the model's vocabulary of {} (is data.tokenizer the model's?)",
             p.where, id, model.vocab_size);
      }
    }
    if (static_cast<std::int64_t>(p.ids.size()) >= context_) {
      fail("{}: the prompt has {} tokens, leaving no room to generate within max_position_embeddings = {}", p.where,
           p.ids.size(), context_);
    }
  }
  if (!product_within_int64(prompts_per_iteration_, group_size_)) {
    fail("rl.prompts_per_iteration {} x rl.group_size {} is beyond the largest count of rollouts (2^63 - 1): with "
         "this group size rl.prompts_per_iteration must be <= {}",
         prompts_per_iteration_, group_size_, largest_factor_within_int64(group_size_));
  }
  if (group_size_ < 2) {
    fail("rl.group_size is {}: GRPO's advantage compares each completion with the others of its prompt's group (its "
         "reward minus their mean), so a group of one has none and every advantage would be 0: nothing would train; "
         "set rl.group_size to at least 2", group_size_);
  }
  // Known from the config: every prompt plus rl.max_new_tokens within the model's attention window.
  const std::string window_origin = data::attention_window_origin(settings.model.checkpoint, settings.model.config_origin);
  for (const auto& p : prompts_.prompts()) {
    check_rollout_window(model, static_cast<std::int64_t>(p.ids.size()), rl_.max_new_tokens, p.where,
                         "rl.max_new_tokens", window_origin);
  }
  window_origin_ = window_origin;
  scratch_ = std::filesystem::temp_directory_path().string();
  if (rank == 0 && eos_.empty()) {
    spdlog::warn("rl.prompts: no eos id (model.checkpoint's config.json or generation_config.json, or rl.chat's end of "
                 "turn): every completion runs to rl.max_new_tokens = {}", rl_.max_new_tokens);
  }
}

std::int64_t OnlineRollouts::steps_per_iteration(std::int64_t global_batch, const std::string& origin) const {
  const std::int64_t rollouts = rollouts_per_iteration();
  if (global_batch <= 0 || rollouts % global_batch != 0) {
    fail("the online RL loop samples rl.prompts_per_iteration x rl.group_size = {} x {} = {} rollouts per iteration, "
         "which do not divide into global batches of {} sequences ({}); make the global batch a divisor of {}",
         prompts_per_iteration_, group_size_, rollouts, global_batch, origin, rollouts);
  }
  const std::int64_t batches = rollouts / global_batch;
  const auto per_iteration = product_within_int64(rl_.epochs, batches);
  if (!per_iteration) {
    fail("rl.epochs_per_iteration {} x {} global batches per iteration ({} rollouts / {}) is beyond the largest "
         "count of steps (2^63 - 1): with these batches rl.epochs_per_iteration must be <= {}",
         rl_.epochs, batches, rollouts, global_batch, largest_factor_within_int64(batches));
  }
  if (!product_within_int64(rl_.iterations, *per_iteration)) {
    fail("rl.iterations {} x {} steps per iteration (rl.epochs_per_iteration {} x {} global batches) is beyond the "
         "largest count of steps (2^63 - 1): rl.iterations must be <= {}",
         rl_.iterations, *per_iteration, rl_.epochs, batches, largest_factor_within_int64(*per_iteration));
  }
  return *per_iteration;
}

std::int64_t OnlineRollouts::max_sequence_length() const {
  return std::min(prompts_.longest() + rl_.max_new_tokens, context_);
}

std::string OnlineRollouts::describe() const {
  return fmt::format("{}, {} prompts x {} completions per iteration, at most {} new tokens", prompts_.describe(),
                     prompts_per_iteration_, group_size_, rl_.max_new_tokens);
}

std::vector<std::int64_t> OnlineRollouts::iteration_prompts(std::int64_t iteration) const {
  data::Sampler sampler(prompts_.size(), order_seed_, shuffle_);
  std::vector<std::int64_t> chosen;
  for (std::int64_t i = 0; i <= iteration; ++i) chosen = sampler.next(prompts_per_iteration_);
  return chosen;
}

DrawnRollouts OnlineRollouts::draw(std::int64_t iteration, model::LlamaModel& model, model::ParamSource& params,
                                   const std::string& policy_name) const {
  const auto start = Clock::now();
  DrawnRollouts drawn;
  drawn.iteration = iteration;
  drawn.chosen = iteration_prompts(iteration);
  // This rank's prompts: positions rank, rank + world, ...
  std::vector<std::vector<std::int32_t>> mine;
  RolloutOptions options;
  for (std::int64_t j = rank_; j < prompts_per_iteration_; j += world_) {
    mine.push_back(prompts_.prompts()[static_cast<std::size_t>(drawn.chosen[static_cast<std::size_t>(j)])].ids);
    drawn.positions.push_back(j);
    options.prompt_keys.push_back(static_cast<std::uint64_t>(j));
    options.prompt_names.push_back(
        prompts_.prompts()[static_cast<std::size_t>(drawn.chosen[static_cast<std::size_t>(j)])].where);
  }
  options.model_name = policy_name;
  options.max_new_tokens_key = "rl.max_new_tokens";
  options.window_origin = window_origin_;
  options.sampling.max_new_tokens = rl_.max_new_tokens;
  options.sampling.temperature = temperature_;
  options.sampling.top_p = rl_.top_p;
  options.sampling.top_k = rl_.top_k;
  options.sampling.seed = substream_seed(rl_.seed, static_cast<std::uint64_t>(iteration));
  options.group_size = group_size_;
  options.concurrency = rl_.concurrency;
  options.eos = eos_;
  if (!rl_.stop.empty()) {
    options.stop = {rl_.stop};
    options.decode = [this](std::span<const std::int32_t> ids) { return prompts_.tokenizer().decode(ids, false); };
  }
  if (!mine.empty()) drawn.completions = sample_rollouts(model, params, mine, options);
  drawn.sample_s = seconds_since(start);
  return drawn;
}

void OnlineRollouts::add_reference(DrawnRollouts& drawn, model::LlamaModel& model, model::ParamSource& reference,
                                   std::int64_t token_cap) const {
  const auto start = Clock::now();
  const auto vocab = static_cast<std::size_t>(model.config().vocab_size);
  drawn.ref_logprobs.assign(drawn.completions.size(), {});
  model::PackedBatch batch;
  std::vector<std::size_t> members;  // completions in the batch
  std::vector<float> logits;
  const auto prompt_of = [&](const SampledCompletion& c) -> const data::Prompt& {
    const auto j = drawn.positions[static_cast<std::size_t>(c.prompt)];
    return prompts_.prompts()[static_cast<std::size_t>(drawn.chosen[static_cast<std::size_t>(j)])];
  };
  const auto prompt_ids = [&](const SampledCompletion& c) -> const std::vector<std::int32_t>& {
    return prompt_of(c).ids;
  };
  const auto run = [&] {
    if (members.empty()) return;
    model.forward(batch, reference, &logits);
    std::size_t offset = 0;
    for (const std::size_t i : members) {
      const auto& c = drawn.completions[i];
      const std::size_t prompt = prompt_ids(c).size();
      auto& out = drawn.ref_logprobs[i];
      for (std::size_t t = 0; t < c.ids.size(); ++t) {
        const std::span<const float> row(logits.data() + (offset + prompt + t - 1) * vocab, vocab);
        if (const std::size_t bad = first_non_finite(row); bad < vocab) {
          fail("the reference policy (the weights the run started from) gives a logit that is not finite ({} for "
               "token {}) after position {} of {}'s completion {} (iteration {}): its activations overflow",
               row[bad], bad, prompt + t - 1, prompt_of(c).where, c.sample, drawn.iteration + 1);
        }
        out.push_back(static_cast<float>(token_logprob(row, c.ids[t], temperature_)));
      }
      offset += prompt + c.ids.size();
    }
    batch.clear();
    members.clear();
  };
  std::vector<std::int32_t> sequence;
  for (std::size_t i = 0; i < drawn.completions.size(); ++i) {
    const auto& c = drawn.completions[i];
    sequence = prompt_ids(c);
    sequence.insert(sequence.end(), c.ids.begin(), c.ids.end());
    if (batch.num_tokens() + static_cast<std::int64_t>(sequence.size()) > token_cap) run();
    batch.append(sequence.data(), nullptr, static_cast<std::int64_t>(sequence.size()), 0.0f);
    members.push_back(i);
  }
  run();
  drawn.reference_s = seconds_since(start);
}

std::optional<RolloutIteration> OnlineRollouts::gather(DrawnRollouts drawn, distributed::HostGroup& group,
                                                      const std::function<bool()>& stop_requested) const {
  const auto start = Clock::now();
  const std::int64_t iteration = drawn.iteration;
  const auto& completions = drawn.completions;
  const auto& positions = drawn.positions;
  const auto& prompts = prompts_.prompts();
  const auto prompt_of = [&](std::int64_t position) -> const data::Prompt& {
    return prompts[static_cast<std::size_t>(drawn.chosen[static_cast<std::size_t>(position)])];
  };
  // This rank's completions, scored by the verifier here (the reward command runs on rank 0).
  const bool by_command = !rl_.reward_command.empty();
  const Verifier verifier = parse_verifier(rl_.verifier);
  json part = json::array();
  for (std::size_t i = 0; i < completions.size(); ++i) {
    const auto& c = completions[i];
    const std::int64_t j = positions[static_cast<std::size_t>(c.prompt)];
    json item = {{"position", j},         {"sample", c.sample}, {"ids", c.ids},
                 {"logprobs", c.logprobs}, {"eos", c.eos},       {"stopped", c.stopped}};
    if (!drawn.ref_logprobs.empty()) item["ref_logprobs"] = drawn.ref_logprobs[i];
    const std::string text = prompts_.tokenizer().decode(c.ids, false);
    if (by_command) {
      item["text"] = text;
    } else {
      item["reward"] = reward_of(verifier, text, prompt_of(j).answer);
    }
    part.push_back(std::move(item));
  }
  const auto parts = group.all_gather_text(part.dump(), "the iteration's sampled completions");
  const auto total = static_cast<std::size_t>(rollouts_per_iteration());
  std::vector<json> items(total);
  for (const auto& text : parts) {
    for (auto& item : json::parse(text)) {
      const auto at = static_cast<std::size_t>(item.at("position").get<std::int64_t>() * group_size_ +
                                               item.at("sample").get<std::int64_t>());
      items[at] = std::move(item);
    }
  }
  if (by_command) {
    // Rank 0 runs the command; every rank learns its rewards, or its error.
    std::string answer;
    if (group.is_root()) {
      std::vector<json> requests;
      for (const auto& item : items) {
        const auto& p = prompt_of(item.at("position").get<std::int64_t>());
        requests.push_back({{"prompt", p.text}, {"completion", item.at("text")}, {"answer", p.answer}});
      }
      try {
        const RewardCommand command{rl_.reward_command, rl_.reward_timeout_s, "rl.reward_timeout_s", scratch_,
                                    stop_requested};
        const auto rewards = command_rewards(command, requests);
        answer = rewards ? json{{"rewards", *rewards}}.dump() : json{{"stopped", true}}.dump();
      } catch (const Error& e) {
        answer = json{{"error", e.what()}}.dump();
      }
    }
    group.broadcast(answer, "the reward command's rewards");
    const json reply = json::parse(answer);
    if (reply.contains("error")) fail("rl.reward_command, iteration {}: {}", iteration + 1, reply.at("error").get<std::string>());
    if (reply.contains("stopped")) return std::nullopt;  // a stop request on rank 0 killed it: every rank stops
    const auto& rewards = reply.at("rewards");
    for (std::size_t i = 0; i < total; ++i) items[i]["reward"] = rewards.at(i);
  }

  RolloutIteration out;
  out.iteration = iteration;
  double correct = 0.0, tokens = 0.0, ended = 0.0, stopped = 0.0;
  std::vector<double> rewards;
  std::vector<std::int64_t> groups;
  std::size_t shortest = static_cast<std::size_t>(-1), longest = 0;
  for (const auto& item : items) {
    const std::int64_t j = item.at("position").get<std::int64_t>();
    const double reward = item.at("reward").get<double>();
    json record = {{"prompt_ids", prompt_of(j).ids}, {"completion_ids", item.at("ids")},
                   {"logprobs", item.at("logprobs")}, {"reward", reward},
                   {"group", j},                     {"temperature", temperature_}};
    if (item.contains("ref_logprobs")) record["ref_logprobs"] = item.at("ref_logprobs");
    out.records += record.dump();
    out.records += '\n';
    rewards.push_back(reward);
    groups.push_back(j);
    correct += reward >= 1.0 ? 1.0 : 0.0;
    const std::size_t length = item.at("ids").size();
    tokens += static_cast<double>(length);
    shortest = std::min(shortest, length);
    longest = std::max(longest, length);
    ended += item.at("eos").get<bool>() ? 1.0 : 0.0;
    stopped += item.at("stopped").get<bool>() ? 1.0 : 0.0;
  }
  const auto n = static_cast<double>(total);
  const data::RewardSpread spread = data::reward_spread(rewards, groups);
  const double seconds = drawn.sample_s + drawn.reference_s + seconds_since(start);
  out.stats = {{"iteration", iteration + 1},
               {"prompts", prompts_per_iteration_},
               {"rollouts", total},
               {"reward_mean", spread.mean},
               {"reward_std", spread.std},
               {"reward_std_within_groups", spread.std_within_groups},
               {"groups_equal_rewards", spread.equal_groups},
               {"accuracy", correct / n},
               {"completion_tokens_mean", tokens / n},
               {"completion_tokens_min", shortest},
               {"completion_tokens_max", longest},
               {"eos_fraction", ended / n},
               {"stop_fraction", stopped / n},
               {"sample_s", drawn.sample_s},
               {"reference_s", drawn.reference_s},
               {"score_s", seconds_since(start)},
               {"rollout_s", seconds},
               {"completion_tokens_per_s", tokens / seconds}};
  return out;
}

}  // namespace odc::train
