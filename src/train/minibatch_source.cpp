#include "odc/train/minibatch_source.h"

#include <spdlog/spdlog.h>

#include "odc/core/error.h"
#include "odc/core/hash.h"
#include "odc/data/data_config.h"
#include "odc/data/text_dataset.h"

namespace odc::train {

MinibatchSource::MinibatchSource(const Config& config, const model::LlamaConfig& model, int rank, int world_size,
                                 distributed::CommKind comm)
    : rank_(rank), world_size_(world_size) {
  dataset_ = data::open_dataset(
      config.get_string("data.train"), config.get_string("data.format"), model.vocab_size,
      data::TextDataOptions{data::resolve_tokenizer_path(config.get_string("data.tokenizer"),
                                                         config.get_string("model.checkpoint")),
                            config.get_string("data.chat_template")});
  minibatch_size_ = config.get_int("data.minibatch_size");
  const std::int64_t global = minibatch_size_ * world_size_;
  if (global > dataset_->size()) {
    fail("data.minibatch_size {} x {} ranks = {} sequences per step, but {} holds only {}", minibatch_size_,
         world_size_, global, dataset_->describe(), dataset_->size());
  }

  // Token cap: explicit, or the longest sequence of the dataset scaled by packing_ratio.
  token_cap_ = data::token_cap(config, dataset_->max_length());
  for (std::int64_t i = 0; i < dataset_->size(); ++i) {
    if (dataset_->length(i) > token_cap_) {
      fail("{}: sequence {} has length {}, which exceeds the microbatch cap "
           "data.max_tokens_per_microbatch = {}", dataset_->describe(), i, dataset_->length(i), token_cap_);
    }
  }
  if (dataset_->max_length() > model.max_position_embeddings) {
    spdlog::warn("longest sequence ({} tokens) exceeds model.config.max_position_embeddings = {}",
                 dataset_->max_length(), model.max_position_embeddings);
  }
  sampler_ = std::make_unique<data::Sampler>(dataset_->size(), static_cast<std::uint64_t>(config.get_int("data.seed")),
                                             config.get_bool("data.shuffle"));
  sequence_reduction_ = config.get_string("train.loss_reduction") == "sequence";

  const std::string balance = config.get_string("data.balance");
  balance_ = data::parse_balance(balance == "auto" ? (comm == distributed::CommKind::odc ? "lb_mini" : "lb_micro")
                                                   : balance);
  if (balance_ == data::Balance::lb_mini && distributed::needs_equal_microbatches(comm, world_size_)) {
    fail("data.balance = lb_mini needs train.comm = odc: LB-Mini gives ranks different numbers of microbatches, "
         "which collectives cannot run (use lb_micro or local_sort with train.comm = collective)");
  }
  cost_model_ = data::cost_model(config, model.linear_flops_per_token(), model.attention_flops_per_pair());
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
  out.global = sampler_->next(minibatch_size_ * world_size_);
  for (auto index : out.global) {
    const auto targets = dataset_->target_count(index);
    out.normalizer += sequence_reduction_ ? (targets > 0 ? 1.0 : 0.0) : static_cast<double>(targets);
  }
  data::PlanInput input;
  input.world_size = world_size_;
  input.token_cap = token_cap_;
  input.cost = cost_model_;
  input.balance = balance_;
  for (auto index : out.global) input.lengths.push_back(dataset_->length(index));
  out.plan = data::make_plan(input);
  out.weights.assign(out.global.size(), 0.0f);
  for (std::size_t i = 0; i < out.global.size(); ++i) {
    const auto targets = static_cast<double>(dataset_->target_count(out.global[i]));
    double w = 0.0;
    if (out.normalizer > 0 && targets > 0) w = sequence_reduction_ ? 1.0 / (targets * out.normalizer) : 1.0 / out.normalizer;
    out.weights[i] = static_cast<float>(w);
  }
  out.mine = out.plan.ranks[static_cast<std::size_t>(rank_)].microbatches;
  if (equal_counts) {
    // Empty microbatches join the collectives of the ranks that have more.
    const auto most = static_cast<std::size_t>(out.plan.max_microbatches());
    out.padded = static_cast<int>(most - out.mine.size());
    out.mine.resize(most);
  }
  return out;
}

void MinibatchSource::build(const Minibatch& minibatch, std::size_t m, model::PackedBatch& out) const {
  out.tokens.clear();
  out.positions.clear();
  out.cu_seqlens.clear();
  out.targets.clear();
  out.loss_weights.clear();
  for (auto i : minibatch.mine[m]) {
    const auto seq = dataset_->get(minibatch.global[static_cast<std::size_t>(i)]);
    out.append(seq.tokens.data(), seq.target_mask.data(), static_cast<std::int64_t>(seq.tokens.size()),
               minibatch.weights[static_cast<std::size_t>(i)]);
  }
}

}  // namespace odc::train
