#include "odc/train/run/minibatch_source.h"

#include <algorithm>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "odc/core/error.h"
#include "odc/core/hash.h"
#include "odc/data/attention_window.h"
#include "odc/data/context_groups.h"
#include "odc/data/data_config.h"
#include "odc/data/length_limit.h"
#include "odc/data/text_dataset.h"
#include "odc/train/config/batch_schedule.h"

namespace odc::train {

namespace {

// The balances that give every rank the same number of sequences (the planner refuses a minibatch
// that does not divide over the ranks).
bool equal_sequence_counts(data::Balance balance) {
  return balance == data::Balance::lb_micro || balance == data::Balance::lb_mini_equal;
}

}  // namespace

std::string zero_advantages_reason(bool rounded) {
  return fmt::format("every advantage is 0 ({}): the policy-gradient term and its gradient are 0, only rl.kl_beta's "
                     "penalty, if set, has a gradient",
                     rounded ? "the rewards of some groups differ, but by less than a float advantage holds after "
                               "rl.scale_rewards (each reward's scaled difference from its group's mean rounds to 0); scale the "
                               "rewards up"
                             : "the rewards of each group are equal");
}

MinibatchSource::MinibatchSource(const RunSettings& settings, const Config& config, const model::LlamaConfig& model,
                                 int rank, int world_size, distributed::CommKind comm, std::int64_t auto_token_cap,
                                 std::int64_t online_max_length)
    : rank_(rank), world_size_(world_size) {
  const DataSettings& data = settings.data;
  global_batch_ = train::global_batch_size(config, world_size_, &global_batch_origin_);
  within_epochs_ = settings.train.within_epochs;
  // The balance first: a batch it cannot split fails before any data is read.
  const std::string& balance = data.balance;
  balance_ = data::parse_balance(balance == "auto" ? (comm == distributed::CommKind::odc ? "lb_mini" : "lb_micro")
                                                   : balance);
  if (balance_ == data::Balance::lb_mini && distributed::needs_equal_microbatches(comm, world_size_)) {
    fail("data.balance = lb_mini needs train.comm = odc: LB-Mini gives ranks different numbers of microbatches, "
         "which collectives cannot run (use lb_micro or local_sort with train.comm = collective)");
  }
  if (balance_ == data::Balance::lb_mini_equal && distributed::needs_equal_microbatches(comm, world_size_)) {
    fail("data.balance = lb_mini_equal needs train.comm = odc: it gives ranks equal numbers of sequences but "
         "different numbers of microbatches, which collectives cannot run (use lb_micro with train.comm = "
         "collective: equal sequence and microbatch counts)");
  }
  check_batch_split(global_batch_, world_size_, balance_, global_batch_origin_);
  sequence_reduction_ = settings.train.sequence_loss;
  policy_ = settings.objective.grpo;
  aggregation_ = settings.objective.aggregation;
  completion_length_ = settings.objective.max_completion_length;
  temperature_ = settings.objective.policy.temperature;
  kl_beta_ = settings.objective.policy.kl_beta;
  shuffle_ = data.shuffle;
  cost_model_ = data::cost_model(config, model.linear_flops_per_token(), model.attention_flops_per_pair());
  if (settings.rl.online()) {
    // The online RL loop: each iteration's rollouts arrive through set_rollouts; none is longer
    // than the longest prompt plus rl.max_new_tokens.
    ODC_CHECK(online_max_length > 0, "MinibatchSource: the online loop without its longest sequence");
    online_ = true;
    within_epochs_ = false;
    token_cap_ = data::token_cap(config, online_max_length, auto_token_cap);
    if (online_max_length > token_cap_) {
      fail("the online RL loop's rollouts can be {} tokens long (the longest prompt of rl.prompts + rl.max_new_tokens "
           "{}), more than the microbatch cap data.max_tokens_per_microbatch = {}{}; raise the cap or lower "
           "rl.max_new_tokens", online_max_length, settings.rl.max_new_tokens, token_cap_,
           auto_token_cap > 0 ? " (auto: the most the memory plan fits)" : "");
    }
    if (completion_length_ == 0) completion_length_ = settings.rl.max_new_tokens;  // dr_grpo's constant, as TRL's
    return;
  }
  // From here to the records' checks everything is read from the data file every rank reads alike:
  // its errors are the same on every rank and printed once (odc::SameOnEveryRank), not once per rank.
  same_on_every_rank([&] {
    dataset_ = open_limited(settings, model.vocab_size);
    if (global_batch_ > dataset_->size()) {
      fail("the global batch is {} sequences per step ({}), but {} holds only {}", global_batch_, global_batch_origin_,
           dataset_->describe(), dataset_->size());
    }
    // Without a single target every step's loss is 0 and nothing trains (it ran to the end, exit 0).
    bool any_target = false;
    for (std::int64_t i = 0; i < dataset_->size() && !any_target; ++i) any_target = dataset_->target_count(i) > 0;
    if (!any_target) {
      const std::int64_t max_length = data.max_length;
      fail("data.train: '{}' has no target tokens in its {} sequences ({}{}): nothing to train on; {}", data.train,
           dataset_->size(), dataset_->no_targets_reason(dataset_->size()),
           max_length > 0 ? fmt::format(", or data.max_length {} cut off every target", max_length) : std::string(),
           policy_ ? "give the rollouts their completions (completion_ids)"
                   : "give each sequence two tokens or more and a loss_mask of 1 on the tokens to predict");
    }

    data::check_attention_window(*dataset_, dataset_->size(), model, data::attention_window_origin(settings.model.checkpoint, settings.model.config_origin),
                           "it would train a model unlike the original",
                           fmt::format("set data.max_length to at most {} with data.over_length truncate or drop",
                                       model.attention_window));
    // Token cap: explicit, or the longest sequence of the dataset scaled by packing_ratio.
    token_cap_ = data::token_cap(config, dataset_->max_length(), auto_token_cap);
    plan_context(settings, comm, dataset_->max_length());
    for (std::int64_t i = 0; i < dataset_->size(); ++i) {
      const std::int64_t length = dataset_->length(i);
      if (length <= token_cap_) continue;
      const int needed = data::smallest_context_degree(length, token_cap_);
      const int allowed = context_dynamic_ ? max_context_degree_ : context_degree_;
      if (needed <= allowed) continue;
      if (allowed > 1) {
        fail("{}: sequence {} has length {}: split over {} ranks, the most {}, a rank's share is still {} tokens, "
             "more than the microbatch cap data.max_tokens_per_microbatch = {}; it needs {} ranks",
             dataset_->record(i), i, length, allowed,
             context_dynamic_ ? "train.context_parallel allows (the world or train.context_parallel_degree)"
                              : "train.context_parallel_degree gives",
             model::ContextCut{length, allowed}.max_rows(), token_cap_, needed);
      }
      fail("{}: sequence {} has length {}, which exceeds the microbatch cap data.max_tokens_per_microbatch = {}{}{}",
           dataset_->record(i), i, length, token_cap_,
           auto_token_cap > 0 ? " (auto: the most the memory plan fits; set train.recompute, data.max_length with "
                                "data.over_length, or train.memory_budget_gib)"
                              : "",
           world_size_ > 1 && !settings.train.context_parallel
               ? fmt::format("; train.context_parallel: auto would split it over {} ranks", needed)
           : world_size_ == 1 && needed > 1
               ? fmt::format("; split over {} ranks (context parallelism) its shares would fit", needed)
               : std::string());
    }
    if (dataset_->max_length() > model.max_position_embeddings && rank_ == 0) {  // the same on every rank
      spdlog::warn("longest sequence ({} tokens) exceeds model.config.max_position_embeddings = {}",
                   dataset_->max_length(), model.max_position_embeddings);
    }
    sampler_ = std::make_unique<data::Sampler>(dataset_->size(), data.seed, data.shuffle);
    if (policy_) check_policy_records(settings.data.train);
  });
  if (within_epochs_ && equal_sequence_counts(balance_) && dataset_->size() % global_batch_ % world_size_ != 0) {
    spdlog::info("data.balance {}: each epoch's last step ({} sequences) does not divide over {} ranks; that "
                 "step is planned with local_sort (every sequence trains)",
                 data::balance_name(balance_), dataset_->size() % global_batch_, world_size_);
  }
}

void MinibatchSource::plan_context(const RunSettings& settings, distributed::CommKind comm, std::int64_t longest) {
  if (!settings.train.context_parallel || world_size_ == 1) return;
  const auto degree = settings.train.context_degree;
  const int needed = data::smallest_context_degree(longest, token_cap_);
  if (comm == distributed::CommKind::odc) {
    max_context_degree_ = degree == 0 ? world_size_ : static_cast<int>(std::min<std::int64_t>(degree, world_size_));
    context_dynamic_ = needed > 1 && max_context_degree_ > 1;
    if (context_dynamic_) max_split_rows_ = longest;
    return;
  }
  // The collective: one degree for the run, groups of consecutive ranks, every sequence split.
  if (degree == 0) {
    if (needed == 1) return;
    int k = needed;
    while (k < world_size_ && world_size_ % k != 0) ++k;
    context_degree_ = std::min(k, world_size_);
  } else {
    context_degree_ = static_cast<int>(degree);
  }
  if (context_degree_ <= 1) {
    context_degree_ = 1;
    return;
  }
  if (world_size_ % context_degree_ != 0) {
    fail("train.context_parallel_degree {} does not divide the {} ranks: the collective's context-parallel groups are "
         "consecutive ranks of equal size", context_degree_, world_size_);
  }
  if (!group_of_rank_.empty()) fail("context parallelism under the collective with hybrid sharding is not supported");
  // A static group's microbatch holds up to its members' caps together.
  max_split_rows_ = std::max<std::int64_t>(longest, token_cap_ * context_degree_);
}

void MinibatchSource::check_policy_records(const std::string& name) {
  std::int64_t longest = 0;
  all_advantages_zero_ = true;
  bool rounded = false;
  for (std::int64_t i = 0; i < dataset_->size(); ++i) {
    const auto policy = dataset_->policy(i);
    if (!policy) fail("{}: train.objective grpo needs rollout records (data.format rollouts)", dataset_->record(i));
    longest = std::max(longest, dataset_->target_count(i));
    all_advantages_zero_ = all_advantages_zero_ && policy->advantage == 0.0f;
    rounded = rounded || policy->rewards_differ;
  }
  if (all_advantages_zero_ && rank_ == 0) spdlog::warn("{}: {}", name, zero_advantages_reason(rounded));
  if (completion_length_ == 0) completion_length_ = std::max<std::int64_t>(longest, 1);
  const auto sampled_at = dataset_->policy(0)->temperature;
  if (sampled_at && *sampled_at != temperature_) {
    fail("{}: the rollouts were sampled at temperature {} but rl.temperature is {}: their log-probabilities and the "
         "policy's would be of different distributions; set rl.temperature: {}",
         name, *sampled_at, temperature_, *sampled_at);
  }
  if (kl_beta_ > 0 && dataset_->policy(0)->ref_logprobs.empty()) {
    fail("rl.kl_beta = {} penalises the KL to the reference policy, but the records of {} carry no "
         "\"ref_logprobs\"; add them (the reference model's log-probability of each completion token) or set "
         "rl.kl_beta: 0",
         kl_beta_, name);
  }
  if (longest > completion_length_ && aggregation_ == "dr_grpo") {
    fail("rl.max_completion_length = {} is shorter than the longest completion of {} ({} tokens): dr_grpo's "
         "normaliser would not bound the loss; raise it or leave it 0 (the longest completion)",
         completion_length_, dataset_->describe(), longest);
  }
}

void MinibatchSource::set_rollouts(std::unique_ptr<data::TokenDataset> rollouts, std::uint64_t order_seed) {
  ODC_CHECK(online_ && rollouts && rollouts->size() > 0, "MinibatchSource::set_rollouts outside the online loop");
  for (std::int64_t i = 0; i < rollouts->size(); ++i) {
    if (rollouts->length(i) > token_cap_) {
      fail("{}: rollout {} has length {}, more than the microbatch cap of {} tokens", rollouts->record(i), i,
           rollouts->length(i), token_cap_);
    }
  }
  dataset_ = std::move(rollouts);
  check_policy_records(dataset_->describe());
  sampler_ = std::make_unique<data::Sampler>(dataset_->size(), order_seed, shuffle_);
}

std::unique_ptr<data::TokenDataset> MinibatchSource::open_limited(const RunSettings& settings, std::int64_t vocab_size) {
  const DataSettings& data = settings.data;
  auto dataset = data::open_dataset(
      data.train, data.format, vocab_size,
      data::TextDataOptions{data::resolve_tokenizer_path(data.tokenizer, settings.model.checkpoint), data.chat_template,
                            data.ignore_extra_fields, settings.objective.scale_rewards});
  const data::LengthLimit limit{data.max_length, data::parse_over_length(data.over_length)};
  data::LengthLimitReport report;
  dataset = data::limit_lengths(std::move(dataset), limit, &report);
  if (report.over > 0 && limit.policy == data::OverLength::drop) {
    spdlog::info("data.max_length {}: dropped {} of {} sequences (the longest had {} tokens); {} remain",
                 limit.max_length, report.over, report.sequences_before, report.longest, dataset->size());
  } else if (report.over > 0) {
    spdlog::info("data.max_length {}: truncated {} of {} sequences (the longest had {} tokens){}", limit.max_length,
                 report.over, report.sequences_before, report.longest,
                 report.lost_targets > 0
                     ? fmt::format("; {} of them kept no prediction target and add nothing to the loss",
                                   report.lost_targets)
                     : std::string());
  }
  return dataset;
}

std::uint64_t MinibatchSource::fingerprint() const {
  Fnv1a h;
  for (std::int64_t i = 0; i < dataset_->size(); ++i) {
    const auto seq = dataset_->get(i);
    h.add(seq.tokens.data(), seq.tokens.size_bytes()).add(seq.target_mask.data(), seq.target_mask.size_bytes());
  }
  return h.value();
}

Minibatch MinibatchSource::next(bool equal_counts) {
  Minibatch out;
  // The global minibatch is the same on every rank; the loss weights are normalized over all of it.
  const std::int64_t count = within_epochs_ ? std::min(global_batch_, sampler_->remaining_in_epoch()) : global_batch_;
  out.global = sampler_->next(count);
  // Per target, its weight in the minibatch's loss: SFT's mean over targets or over sequences
  // (train.loss_reduction); grpo's aggregations (rl.loss_aggregation) as TRL's GRPOTrainer weighs a
  // step's tokens: grpo = 1 / (the sequence's tokens x every sequence of the minibatch, empty ones
  // included), dapo = 1 / (tokens of the minibatch), dr_grpo = 1 / (sequences x the constant length).
  const bool per_sequence = policy_ ? aggregation_ == "grpo" : sequence_reduction_;
  for (auto index : out.global) {
    const auto targets = dataset_->target_count(index);
    if (policy_ && aggregation_ != "dapo") {
      out.normalizer += 1.0;
    } else {
      out.normalizer += per_sequence ? (targets > 0 ? 1.0 : 0.0) : static_cast<double>(targets);
    }
  }
  if (policy_ && aggregation_ == "dr_grpo") out.normalizer *= static_cast<double>(completion_length_);
  out.zero_advantages = policy_ && !all_advantages_zero_ &&
                        std::all_of(out.global.begin(), out.global.end(),
                                    [&](std::int64_t i) { return dataset_->policy(i)->advantage == 0.0f; });
  out.zero_advantages_rounded = out.zero_advantages && std::any_of(out.global.begin(), out.global.end(), [&](std::int64_t i) {
                                  return dataset_->policy(i)->rewards_differ;
                                });
  data::PlanInput input;
  input.world_size = world_size_;
  input.token_cap = token_cap_;
  input.cost = cost_model_;
  input.group_of_rank = group_of_rank_;
  const bool even = count % world_size_ == 0;
  input.balance = equal_sequence_counts(balance_) && !even ? data::Balance::local_sort : balance_;
  for (auto index : out.global) input.lengths.push_back(dataset_->length(index));
  input.context_dynamic = context_dynamic_;
  input.max_context_degree = max_context_degree_;
  input.context_degree = context_degree_;
  out.plan = data::make_plan(input);
  out.weights.assign(out.global.size(), 0.0f);
  for (std::size_t i = 0; i < out.global.size(); ++i) {
    const auto targets = static_cast<double>(dataset_->target_count(out.global[i]));
    double w = 0.0;
    if (out.normalizer > 0 && targets > 0) w = per_sequence ? 1.0 / (targets * out.normalizer) : 1.0 / out.normalizer;
    out.weights[i] = static_cast<float>(w);
  }
  out.mine = out.plan.ranks[static_cast<std::size_t>(rank_)].microbatches;
  if (equal_counts) {
    // Empty microbatches join the collectives of the ranks that have more.
    std::size_t most = static_cast<std::size_t>(out.plan.max_microbatches());
    if (!group_of_rank_.empty()) {
      most = 0;
      for (int r = 0; r < world_size_; ++r) {
        const auto i = static_cast<std::size_t>(r);
        if (group_of_rank_[i] == group_of_rank_[static_cast<std::size_t>(rank_)]) {
          most = std::max(most, out.plan.ranks[i].microbatches.size());
        }
      }
    }
    out.padded = static_cast<int>(most - out.mine.size());
    out.mine.resize(most);
  }
  split_microbatches(out);
  return out;
}

void MinibatchSource::split_microbatches(Minibatch& out) const {
  out.context.assign(out.mine.size(), model::ContextSplit{});
  if (context_degree_ > 1) {
    // Static: this rank's group is its block of consecutive ranks; every member has the group's
    // microbatches (and paddings), in the same order.
    model::ContextSplit split;
    const int first = rank_ / context_degree_ * context_degree_;
    for (int r = first; r < first + context_degree_; ++r) split.ranks.push_back(r);
    split.member = rank_ - first;
    for (std::size_t m = 0; m < out.mine.size(); ++m) {
      if (out.mine[m].empty()) continue;
      out.context[m] = split;
      out.context[m].tag = m + 1;
      for (const auto i : out.mine[m]) out.context[m].lengths.push_back(dataset_->length(out.global[static_cast<std::size_t>(i)]));
    }
    return;
  }
  // Dynamic: the plan's groups this rank belongs to, in the plan's order, before its own.
  std::vector<std::vector<std::int64_t>> mine;
  std::vector<model::ContextSplit> context;
  for (std::size_t g = 0; g < out.plan.groups.size(); ++g) {
    const auto& group = out.plan.groups[g];
    const auto at = std::find(group.ranks.begin(), group.ranks.end(), rank_);
    if (at == group.ranks.end()) continue;
    model::ContextSplit split;
    split.ranks = group.ranks;
    split.member = static_cast<int>(at - group.ranks.begin());
    split.lengths = {dataset_->length(out.global[static_cast<std::size_t>(group.sequence)])};
    split.tag = g + 1;
    mine.push_back({group.sequence});
    context.push_back(std::move(split));
  }
  if (mine.empty()) return;
  for (std::size_t m = 0; m < out.mine.size(); ++m) {
    mine.push_back(std::move(out.mine[m]));
    context.emplace_back();
  }
  out.mine = std::move(mine);
  out.context = std::move(context);
}

void MinibatchSource::set_collective_groups(std::vector<int> group_of_rank) {
  if (group_of_rank.size() != static_cast<std::size_t>(world_size_)) {
    fail("collective groups for {} ranks in a world of {}", group_of_rank.size(), world_size_);
  }
  group_of_rank_ = std::move(group_of_rank);
}

void MinibatchSource::append_sequence(const Minibatch& minibatch, std::int64_t i, model::PackedBatch& out) const {
  const auto index = minibatch.global[static_cast<std::size_t>(i)];
  const auto seq = dataset_->get(index);
  out.append(seq.tokens.data(), seq.target_mask.data(), static_cast<std::int64_t>(seq.tokens.size()),
             minibatch.weights[static_cast<std::size_t>(i)]);
  if (policy_) {
    const auto policy = dataset_->policy(index);
    out.append_policy(policy->logprobs, policy->ref_logprobs, policy->advantage);
  }
}

void MinibatchSource::build(const Minibatch& minibatch, std::size_t m, model::PackedBatch& out) const {
  out.clear();
  const bool split = m < minibatch.context.size() && minibatch.context[m].active();
  if (!split) {
    for (auto i : minibatch.mine[m]) append_sequence(minibatch, i, out);
    return;
  }
  // This member's share of every sequence: the whole sequence built as usual (targets, weights,
  // policy inputs), then its two chunks taken from it.
  const model::ContextSplit& context = minibatch.context[m];
  model::PackedBatch whole;
  for (auto i : minibatch.mine[m]) {
    whole.clear();
    append_sequence(minibatch, i, whole);
    out.append_share(whole, context.k(), context.member);
  }
  out.context.ranks = context.ranks;
  out.context.member = context.member;
  out.context.tag = context.tag;
}

}  // namespace odc::train
