#include "odc/train/run/evaluation.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "odc/core/error.h"
#include "odc/data/attention_window.h"
#include "odc/data/text_dataset.h"
#include "odc/train/run/minibatch_source.h"

namespace odc::train {

namespace {

// Rank `rank`'s share of the first `count` sequences (i mod world == rank), packed in order into
// microbatches of at most `cap` tokens; a sequence longer than the cap gets a microbatch of its own.
std::vector<std::vector<std::int64_t>> pack_share(const data::TokenDataset& dataset, std::int64_t count, int rank,
                                                  int world, std::int64_t cap) {
  std::vector<std::vector<std::int64_t>> out;
  std::int64_t tokens = 0;
  for (std::int64_t i = rank; i < count; i += world) {
    const std::int64_t length = dataset.length(i);
    if (out.empty() || (tokens > 0 && tokens + length > cap)) {
      out.emplace_back();
      tokens = 0;
    }
    out.back().push_back(i);
    tokens += length;
  }
  return out;
}

}  // namespace

Evaluator::Evaluator(const RunSettings& settings, const model::LlamaConfig& model, int rank, int world_size,
                     std::int64_t token_cap)
    : every_(settings.train.eval_every) {
  const DataSettings& data = settings.data;
  const std::string& path = data.eval;
  if (path.empty()) fail("data.eval is not set: there is nothing to evaluate on");
  if (!std::filesystem::exists(path)) {
    fail("data.eval: '{}' does not exist (the held-out dataset, in data.format {}); fix the path or unset "
         "data.eval", path, data.format);
  }
  dataset_ = data::open_dataset(
      path, data.format, model.vocab_size,
      data::TextDataOptions{data::resolve_tokenizer_path(data.tokenizer, settings.model.checkpoint),
                            data.chat_template, data.ignore_extra_fields});
  const std::int64_t limit = data.eval_max_sequences;
  count_ = limit > 0 ? std::min(limit, dataset_->size()) : dataset_->size();
  data::check_attention_window(*dataset_, count_, model, data::attention_window_origin(settings.model.checkpoint, settings.model.config_origin),
                         "its eval loss would not be the original model's",
                         fmt::format("keep data.eval's sequences to at most {} tokens (data.max_length does not "
                                     "apply to data.eval)", model.attention_window));
  std::int64_t targets = 0;
  for (std::int64_t i = 0; i < count_; ++i) targets += dataset_->target_count(i);
  if (targets == 0) {
    fail("data.eval: '{}' has no target tokens in its first {} sequences ({}): nothing to score", path, count_,
         dataset_->no_targets_reason(count_));
  }
  for (int r = 0; r < world_size; ++r) {
    auto share = pack_share(*dataset_, count_, r, world_size, token_cap);
    most_ = std::max(most_, share.size());
    if (r == rank) mine_ = std::move(share);
  }
  spdlog::info("eval: {}, {} sequences ({} target tokens) every {}", dataset_->describe(), count_, targets,
               every_ > 0 ? fmt::format("{} steps and at the end", every_) : std::string("run, at the end"));
}

bool Evaluator::due(std::int64_t step, std::int64_t last_step) const {
  return every_ > 0 && step % every_ == 0 && step < last_step;
}

EvalSummary Evaluator::run(model::LlamaModel& model, backend::Backend& backend, distributed::Comm& comm,
                           distributed::HostGroup& group, std::int64_t step) {
  // Empty microbatches join the collectives of the ranks that have more (same calls, no tokens).
  const std::size_t count = comm.needs_equal_microbatches() ? most_ : mine_.size();
  model.set_tracer(nullptr);
  comm.set_tracer(nullptr);
  group.announce(fmt::format("eval after step {}: start", step));
  comm.begin_minibatch();
  std::array<double, 3> sums{};  // nll, target tokens, sequences
  for (std::size_t m = 0; m < count; ++m) {
    batch_.tokens.clear();
    batch_.positions.clear();
    batch_.cu_seqlens.clear();
    batch_.targets.clear();
    batch_.loss_weights.clear();
    if (m < mine_.size()) {
      for (const std::int64_t i : mine_[m]) {
        const auto seq = dataset_->get(i);
        batch_.append(seq.tokens.data(), seq.target_mask.data(), static_cast<std::int64_t>(seq.tokens.size()), 1.0f);
        sums[2] += 1.0;
      }
    }
    group.announce(fmt::format("eval after step {}: microbatch {}/{}", step, m + 1, count));
    const model::MicrobatchResult out = model.forward(batch_, comm, nullptr);
    sums[0] += out.nll_sum;
    sums[1] += out.target_tokens;
  }
  group.announce(fmt::format("eval after step {}: end", step));
  comm.end_minibatch();
  backend.synchronize();
  group.all_reduce_sum(sums, "the evaluation sums (nll, target tokens, sequences)");
  EvalSummary result;
  result.step = step;
  result.tokens = sums[1];
  result.sequences = static_cast<std::int64_t>(sums[2]);
  result.loss = sums[1] > 0 ? sums[0] / sums[1] : 0.0;
  result.perplexity = std::exp(result.loss);
  if (!std::isfinite(result.loss)) fail("eval after step {}: the loss ({}) is not finite", step, result.loss);
  return result;
}

}  // namespace odc::train
