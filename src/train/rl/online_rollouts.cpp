#include "odc/train/rl/online_rollouts.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "odc/core/checked_math.h"
#include "odc/core/error.h"
#include "odc/core/random.h"
#include "odc/core/shell_command.h"
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

// What the reward command's end takes beyond rl.reward_timeout_s: its group's SIGTERM grace before
// the SIGKILL, then a second for the kill, the reap and the rewards' broadcast.
constexpr double kRewardMargin_s = std::chrono::duration<double>(kKillGrace).count() + 1.0;

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
  // While rank 0 runs the reward command the other ranks wait for its rewards, a wait the host
  // group bounds by comm.timeout_s: a command allowed longer would end the run as a lost peer (and
  // differently under each launcher's group) before its own limit is reached.
  const double wait_s = settings.comm.transport.timeout_s;
  if (!rl_.reward_command.empty() && world_size > 1 && !(wait_s > rl_.reward_timeout_s + kRewardMargin_s)) {
    fail("rl.reward_command on {} ranks: comm.timeout_s = {:g} s must exceed rl.reward_timeout_s = {:g} s by more "
         "than {:g} s (the other ranks wait that long for rank 0's rewards, and a wait past comm.timeout_s is an "
         "error): raise comm.timeout_s above {:g} or lower rl.reward_timeout_s",
         world_size, wait_s, rl_.reward_timeout_s, kRewardMargin_s, rl_.reward_timeout_s + kRewardMargin_s);
  }
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
  // This rank's prompts: its positions of the deal (RlLoopSettings::prompt_positions).
  std::vector<std::vector<std::int32_t>> mine;
  RolloutOptions options;
  for (const std::int64_t j : rl_.prompt_positions(rank_, world_)) {
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
  drawn.prompt_ids = std::move(mine);
  drawn.prompt_names = std::move(options.prompt_names);
  drawn.sample_s = seconds_since(start);
  return drawn;
}

void OnlineRollouts::add_reference(DrawnRollouts& drawn, model::LlamaModel& model, model::ParamSource& reference,
                                   std::int64_t token_cap) const {
  const auto start = Clock::now();
  ReferenceOptions options;
  options.temperature = temperature_;
  options.token_cap = token_cap;
  options.model_name = "the reference policy (the weights the run started from)";
  options.overflow_note = fmt::format(" (iteration {}): its activations overflow", drawn.iteration + 1);
  drawn.ref_logprobs =
      reference_logprobs(model, reference, drawn.completions, drawn.prompt_ids, drawn.prompt_names, options);
  drawn.reference_s = seconds_since(start);
}

namespace {

// A completion as it travels between ranks, in binary: a fixed header, then its ids, log-probabilities,
// the reference's (has_ref) and its text (text_bytes: for the reward command on rank 0).
struct ItemHeader {
  std::int64_t position = 0;
  std::int64_t sample = 0;
  std::int64_t tokens = 0;
  std::int64_t text_bytes = 0;
  double reward = 0.0;
  std::uint8_t eos = 0, stopped = 0, has_ref = 0, pad[5] = {};
};
static_assert(sizeof(ItemHeader) == 48);

struct Item {
  ItemHeader head;
  std::vector<std::int32_t> ids;
  std::vector<float> logprobs;
  std::optional<std::vector<float>> ref_logprobs;
  std::string text;
};

template <typename T>
void put(std::string& out, const T* values, std::size_t count) {
  out.append(reinterpret_cast<const char*>(values), count * sizeof(T));
}

template <typename T>
void take(std::string_view& in, T* values, std::size_t count) {
  const std::size_t bytes = count * sizeof(T);
  ODC_CHECK(in.size() >= bytes, "online rollouts: a gathered part ends {} bytes short", bytes - in.size());
  std::memcpy(values, in.data(), bytes);
  in.remove_prefix(bytes);
}

void put_item(std::string& out, const Item& item) {
  put(out, &item.head, 1);
  put(out, item.ids.data(), item.ids.size());
  put(out, item.logprobs.data(), item.logprobs.size());
  if (item.ref_logprobs) put(out, item.ref_logprobs->data(), item.ref_logprobs->size());
  put(out, item.text.data(), item.text.size());
}

Item take_item(std::string_view& in) {
  Item item;
  take(in, &item.head, 1);
  const auto n = static_cast<std::size_t>(item.head.tokens);
  item.ids.resize(n);
  take(in, item.ids.data(), n);
  item.logprobs.resize(n);
  take(in, item.logprobs.data(), n);
  if (item.head.has_ref != 0) {
    item.ref_logprobs.emplace(n);
    take(in, item.ref_logprobs->data(), n);
  }
  item.text.resize(static_cast<std::size_t>(item.head.text_bytes));
  take(in, item.text.data(), item.text.size());
  return item;
}

}  // namespace

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
  Scorer scorer;
  scorer.verifier = parse_verifier(rl_.verifier);
  std::vector<std::string> texts;
  std::vector<const data::Prompt*> scored;
  for (const auto& c : completions) {
    texts.push_back(prompts_.tokenizer().decode(c.ids, false));
    scored.push_back(&prompt_of(positions[static_cast<std::size_t>(c.prompt)]));
  }
  std::vector<double> rewards;
  if (!by_command) rewards = *score_completions(scorer, texts, scored);
  std::string part;
  for (std::size_t i = 0; i < completions.size(); ++i) {
    const auto& c = completions[i];
    Item item;
    item.head.position = positions[static_cast<std::size_t>(c.prompt)];
    item.head.sample = c.sample;
    item.head.tokens = static_cast<std::int64_t>(c.ids.size());
    item.head.eos = c.eos ? 1 : 0;
    item.head.stopped = c.stopped ? 1 : 0;
    item.head.has_ref = drawn.ref_logprobs.empty() ? 0 : 1;
    item.ids = c.ids;
    item.logprobs = c.logprobs;
    if (!drawn.ref_logprobs.empty()) item.ref_logprobs = drawn.ref_logprobs[i];
    if (by_command) {
      item.text = std::move(texts[i]);
      item.head.text_bytes = static_cast<std::int64_t>(item.text.size());
    } else {
      item.head.reward = rewards[i];
    }
    put_item(part, item);
  }
  const auto parts = group.all_gather_text(part, "the iteration's sampled completions");
  const auto total = static_cast<std::size_t>(rollouts_per_iteration());
  std::vector<Item> items(total);
  for (const auto& bytes : parts) {
    std::string_view in(bytes);
    while (!in.empty()) {
      Item item = take_item(in);
      const auto at = static_cast<std::size_t>(item.head.position * group_size_ + item.head.sample);
      items[at] = std::move(item);
    }
  }
  if (by_command) {
    // Rank 0 runs the command; every rank learns its rewards (binary doubles), or its error.
    std::string answer;
    if (group.is_root()) {
      std::vector<std::string> all_texts;
      std::vector<const data::Prompt*> all_prompts;
      for (const auto& item : items) {
        all_texts.push_back(item.text);
        all_prompts.push_back(&prompt_of(item.head.position));
      }
      try {
        scorer.command = RewardCommand{rl_.reward_command, rl_.reward_timeout_s, "rl.reward_timeout_s", scratch_,
                                       stop_requested};
        const auto scored_all = score_completions(scorer, all_texts, all_prompts);
        if (scored_all) {
          answer = "r";
          put(answer, scored_all->data(), scored_all->size());
        } else {
          answer = "s";
        }
      } catch (const Error& e) {
        answer = std::string("e") + e.what();
      }
    }
    group.broadcast(answer, "the reward command's rewards");
    if (answer.front() == 'e') fail("rl.reward_command, iteration {}: {}", iteration + 1, answer.substr(1));
    if (answer.front() == 's') return std::nullopt;  // a stop request on rank 0 killed it: every rank stops
    std::string_view in(answer);
    in.remove_prefix(1);
    for (auto& item : items) take(in, &item.head.reward, 1);
  }

  RolloutIteration out;
  out.iteration = iteration;
  std::vector<std::uint8_t> ended, stopped;
  for (auto& item : items) {
    const std::int64_t j = item.head.position;
    out.records.push_back(rollout_record(prompt_of(j).ids, std::move(item.ids), std::move(item.logprobs),
                                         item.head.reward, j, temperature_, std::move(item.ref_logprobs)));
    ended.push_back(item.head.eos);
    stopped.push_back(item.head.stopped);
  }
  const RolloutStats summary = rollout_stats(out.records, ended, stopped);
  const data::RewardSpread& spread = summary.spread;
  const double tokens = summary.tokens;
  const auto n = static_cast<double>(total);
  const double seconds = drawn.sample_s + drawn.reference_s + seconds_since(start);
  out.stats = {{"iteration", iteration + 1},
               {"prompts", prompts_per_iteration_},
               {"rollouts", total},
               {"reward_mean", spread.mean},
               {"reward_std", spread.std},
               {"reward_std_within_groups", spread.std_within_groups},
               {"groups_equal_rewards", spread.equal_groups},
               {"accuracy", summary.accuracy},
               {"completion_tokens_mean", tokens / n},
               {"completion_tokens_min", summary.shortest},
               {"completion_tokens_max", summary.longest},
               {"eos_fraction", summary.eos_fraction},
               {"stop_fraction", summary.stop_fraction},
               {"sample_s", drawn.sample_s},
               {"reference_s", drawn.reference_s},
               {"score_s", seconds_since(start)},
               {"rollout_s", seconds},
               {"completion_tokens_per_s", tokens / seconds}};
  return out;
}

}  // namespace odc::train
