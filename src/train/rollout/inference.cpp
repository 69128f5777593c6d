#include "odc/train/rollout/inference.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "odc/backend/backend_factory.h"
#include "odc/core/error.h"
#include "odc/data/attention_window.h"
#include "odc/io/hf_checkpoint.h"

namespace odc::train {

namespace {

// "eos_token_id" may be an int or a list; generation_config.json overrides config.json.
void collect_eos(const std::filesystem::path& file, std::vector<std::int32_t>& eos) {
  std::ifstream in(file);
  if (!in) return;
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("'{}' is not valid JSON: {}", file.string(), e.what());
  }
  if (!json.is_object() || !json.contains("eos_token_id") || json["eos_token_id"].is_null()) return;
  eos.clear();
  const auto& value = json["eos_token_id"];
  if (value.is_number_integer()) {
    eos.push_back(value.get<std::int32_t>());
  } else if (value.is_array()) {
    for (const auto& id : value) {
      if (!id.is_number_integer()) fail("'{}': eos_token_id must hold integers, found {}", file.string(), id.dump());
      eos.push_back(id.get<std::int32_t>());
    }
  } else {
    fail("'{}': eos_token_id must be an integer or a list, found {}", file.string(), value.dump());
  }
}

// "bos_token_id" (an int, or null); generation_config.json overrides config.json.
void collect_bos(const std::filesystem::path& file, std::optional<std::int32_t>& bos) {
  std::ifstream in(file);
  if (!in) return;
  const auto json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);  // collect_eos names bad JSON
  if (!json.is_object() || !json.contains("bos_token_id") || json["bos_token_id"].is_null()) return;
  if (!json["bos_token_id"].is_number_integer()) {
    fail("'{}': bos_token_id must be an integer, found {}", file.string(), json["bos_token_id"].dump());
  }
  bos = json["bos_token_id"].get<std::int32_t>();
}

}  // namespace

std::vector<std::int32_t> eos_token_ids(const std::string& dir) {
  std::vector<std::int32_t> eos;
  collect_eos(std::filesystem::path(dir) / "config.json", eos);
  collect_eos(std::filesystem::path(dir) / "generation_config.json", eos);
  return eos;
}

LoadedModel::LoadedModel(const std::string& dir, int threads) : dir_(dir) {
  const io::HfCheckpoint checkpoint(dir);
  architecture_ = checkpoint.architecture();
  model_ = std::make_unique<model::LlamaModel>(checkpoint.config(), backend::make_backend("cpu", DType::f32, threads));
  // Forwards only: the weights and nothing of training (no gradients, no moments), filled by the
  // load alone (nothing drawn first).
  const distributed::ShardLayout layout(model_->units(), 1, 0);
  store_ = std::make_unique<distributed::ShardStore>(layout, model_->units(), checkpoint.config(), std::nullopt,
                                                     std::span<float>{}, nullptr, distributed::StoreContents::weights);
  for (int u = 0; u < layout.num_units(); ++u) checkpoint.read_unit_range(u, 0, layout.unit(u).shard, store_->master(u));
  comm_ = std::make_unique<distributed::LocalComm>(*store_);
  eos_ = train::eos_token_ids(dir);
  collect_bos(std::filesystem::path(dir) / "config.json", bos_);
  collect_bos(std::filesystem::path(dir) / "generation_config.json", bos_);
}

model::MicrobatchResult LoadedModel::forward(const model::PackedBatch& batch, std::vector<float>* logits) {
  return model_->forward(batch, *comm_, logits);
}

model::KvCache LoadedModel::make_cache(std::int64_t capacity) {
  return model::KvCache(model_->backend(), model_->config(), capacity);
}

void LoadedModel::forward_cached(std::span<const std::int32_t> tokens, model::KvCache& cache,
                                 std::vector<float>& logits) {
  model_->forward_cached(tokens, cache, *comm_, logits);
}

EvalResult evaluate(LoadedModel& model, const data::TokenDataset& dataset, std::int64_t max_tokens,
                    std::int64_t max_sequences) {
  if (max_tokens < 1) fail("evaluation batch size must be at least 1 token, found {}", max_tokens);
  const std::int64_t count = max_sequences > 0 ? std::min(max_sequences, dataset.size()) : dataset.size();
  data::check_attention_window(dataset, count, model.config(),
                         data::attention_window_origin(model.dir(), ""),
                         "its loss would not be the original model's",
                         fmt::format("score sequences of at most {} tokens", model.config().attention_window));
  EvalResult result;
  // Past max_position_embeddings the model runs (rotary positions are computed for any position, as
  // in transformers) but outside what it was trained on: scored, as odc-train trains such
  // sequences, with a warning naming them and a count in the result.
  const std::int64_t context = model.config().max_position_embeddings;
  std::string first_over;
  for (std::int64_t i = 0; i < count; ++i) {
    if (dataset.length(i) <= context) continue;
    if (result.over_context++ == 0) first_over = fmt::format("{} ({} tokens)", dataset.record(i), dataset.length(i));
  }
  if (result.over_context > 0) {
    spdlog::warn("{} of the {} sequences scored are longer than max_position_embeddings = {} of the model in '{}' "
                 "(the first: {}): their positions past it are outside the model's context, so the loss there does "
                 "not measure the model within it; cut the sequences to the context "
                 "to score only that", result.over_context, count, context, model.dir(), first_over);
  }
  model::PackedBatch batch;
  std::int64_t batch_first = 0;               // the first sequence of `batch`
  std::int64_t bad_first = -1, bad_last = -1;  // the first microbatch whose loss is not finite
  auto flush = [&](std::int64_t next) {
    if (batch.num_tokens() == 0) return;
    const auto out = model.forward(batch, nullptr);
    if (!std::isfinite(out.nll_sum) && bad_first < 0) {
      bad_first = batch_first;
      bad_last = next - 1;
    }
    result.loss += out.nll_sum;
    result.tokens += out.target_tokens;
    batch = model::PackedBatch{};
    batch_first = next;
  };
  for (std::int64_t i = 0; i < count; ++i) {
    const auto seq = dataset.get(i);
    const auto length = static_cast<std::int64_t>(seq.tokens.size());
    if (batch.num_tokens() > 0 && batch.num_tokens() + length > max_tokens) flush(i);
    batch.append(seq.tokens.data(), seq.target_mask.data(), length, 1.0f);
    ++result.sequences;
  }
  flush(count);
  if (result.tokens == 0) {
    fail("{}: no target tokens to score in the first {} sequences ({})", dataset.describe(), count,
         dataset.no_targets_reason(count));
  }
  result.loss /= result.tokens;
  result.perplexity = std::exp(result.loss);
  // JSON has no NaN: it was printed as a null loss with exit status 0.
  if (!std::isfinite(result.loss)) {
    fail("the loss of the model in '{}' on {} is not finite ({}{}): the model's activations overflow or its "
         "weights are damaged", model.dir(), dataset.describe(), result.loss,
         bad_first >= 0 ? fmt::format(", first in sequences {}..{}", bad_first, bad_last) : std::string());
  }
  return result;
}

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::eos: return "eos";
    case FinishReason::length: return "length";
    case FinishReason::stop: return "stop";
    case FinishReason::context: return "context";
  }
  return "?";
}

namespace {

// Where the earliest of the stop strings starts in `text`, or npos.
std::size_t find_stop(const std::string& text, const std::vector<std::string>& stop) {
  std::size_t first = std::string::npos;
  for (const auto& s : stop) first = std::min(first, text.find(s));
  return first;
}

}  // namespace

GenerateResult generate(LoadedModel& model, const std::vector<std::int32_t>& prompt, const GenerateOptions& options,
                        const TokenDecoder& decode) {
  check_generate_options(options);
  if (!options.stop.empty() && !decode) fail("stop strings need a decoder of the generated ids");
  if (prompt.empty()) fail("generation needs a non-empty prompt");
  const std::int64_t context = model.config().max_position_embeddings;
  const auto prompt_length = static_cast<std::int64_t>(prompt.size());
  if (prompt_length > context) {
    fail("the prompt has {} tokens, more than the model's context of {} (max_position_embeddings); shorten it",
         prompt.size(), context);
  }
  // Attention here spans the whole sequence: the original model's sliding window only while the
  // sequence fits in it.
  if (const std::int64_t window = model.config().attention_window;
      window > 0 && prompt_length + options.max_new_tokens > window) {
    fail("the prompt has {} tokens and max_new_tokens is {}: {} tokens, more than the model's attention window of {} "
         "(sliding_window in {}): the original model attends only to the last {} tokens, attention here spans the "
         "whole sequence, so it would generate differently; keep the prompt plus max_new_tokens within {}",
         prompt_length, options.max_new_tokens, prompt_length + options.max_new_tokens, window,
         (std::filesystem::path(model.dir()) / "config.json").string(), window, window);
  }
  const std::int64_t vocab = model.config().vocab_size;
  for (auto id : prompt) {
    if (id < 0 || id >= vocab) fail("prompt token id {} is outside the model's vocabulary of {}", id, vocab);
  }
  TokenSampler sampler(options, vocab);
  for (auto id : prompt) sampler.observe(id);
  // Positions [0, prompt + max_new_tokens) at most, and never beyond the context.
  std::optional<model::KvCache> cache;
  if (options.use_cache && options.max_new_tokens > 0) {
    cache.emplace(model.make_cache(std::min(prompt_length + options.max_new_tokens, context)));
  }
  GenerateResult result;
  std::vector<std::int32_t> sequence = prompt;
  std::vector<float> logits;
  const auto& eos = model.eos_token_ids();
  for (std::int64_t step = 0; step < options.max_new_tokens; ++step) {
    if (static_cast<std::int64_t>(sequence.size()) >= context) {
      result.finish = FinishReason::context;
      break;
    }
    if (cache) {
      // The first step runs the prompt (prefill), each later one only the token it added.
      const auto fresh = step == 0 ? std::span<const std::int32_t>(sequence)
                                   : std::span<const std::int32_t>(&sequence.back(), 1);
      model.forward_cached(fresh, *cache, logits);
    } else {
      model::PackedBatch batch;
      batch.append(sequence.data(), nullptr, static_cast<std::int64_t>(sequence.size()), 0.0f);
      model.forward(batch, &logits);
      logits.erase(logits.begin(), logits.end() - vocab);  // the last position's row
    }
    if (const std::size_t bad = first_non_finite(logits); bad < logits.size()) {
      fail("the model in '{}' gives a logit that is not finite ({} for token {}) after position {} of the sequence "
           "(the prompt's {} tokens and {} generated): its activations overflow or its weights are damaged; nothing "
           "can be generated from it", model.dir(), logits[bad], bad, sequence.size() - 1, prompt.size(),
           result.ids.size());
    }
    const std::int32_t next = sampler.next(logits);
    result.ids.push_back(next);
    sequence.push_back(next);
    sampler.observe(next);
    if (std::find(eos.begin(), eos.end(), next) != eos.end()) {
      result.finish = FinishReason::eos;
      break;
    }
    if (!options.stop.empty()) {
      const std::string text = decode(result.ids);
      if (const std::size_t at = find_stop(text, options.stop); at != std::string::npos) {
        result.text = text.substr(0, at);
        result.finish = FinishReason::stop;
        return result;
      }
    }
  }
  if (decode) result.text = decode(result.ids);
  return result;
}

}  // namespace odc::train
