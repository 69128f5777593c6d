#include "odc/train/inference.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>

#include <nlohmann/json.hpp>

#include "odc/backend/backend_factory.h"
#include "odc/core/error.h"
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

}  // namespace

LoadedModel::LoadedModel(const std::string& dir, int threads) {
  const io::HfCheckpoint checkpoint(dir);
  architecture_ = checkpoint.architecture();
  model_ = std::make_unique<model::LlamaModel>(checkpoint.config(), backend::make_backend("cpu", DType::f32, threads));
  const distributed::ShardLayout layout(model_->units(), 1, 0);
  store_ = std::make_unique<distributed::ShardStore>(layout, model_->units(), checkpoint.config(), 0);
  for (int u = 0; u < layout.num_units(); ++u) checkpoint.read_unit_range(u, 0, layout.unit(u).shard, store_->master(u));
  comm_ = std::make_unique<distributed::LocalComm>(*store_);
  collect_eos(std::filesystem::path(dir) / "config.json", eos_);
  collect_eos(std::filesystem::path(dir) / "generation_config.json", eos_);
}

model::MicrobatchResult LoadedModel::forward(const model::PackedBatch& batch, std::vector<float>* logits) {
  return model_->forward(batch, *comm_, logits);
}

EvalResult evaluate(LoadedModel& model, const data::TokenDataset& dataset, std::int64_t max_tokens,
                    std::int64_t max_sequences) {
  if (max_tokens < 1) fail("evaluation batch size must be at least 1 token, found {}", max_tokens);
  const std::int64_t count = max_sequences > 0 ? std::min(max_sequences, dataset.size()) : dataset.size();
  EvalResult result;
  model::PackedBatch batch;
  auto flush = [&] {
    if (batch.num_tokens() == 0) return;
    const auto out = model.forward(batch, nullptr);
    result.loss += out.nll_sum;
    result.tokens += out.target_tokens;
    batch = model::PackedBatch{};
  };
  for (std::int64_t i = 0; i < count; ++i) {
    const auto seq = dataset.get(i);
    const auto length = static_cast<std::int64_t>(seq.tokens.size());
    if (batch.num_tokens() > 0 && batch.num_tokens() + length > max_tokens) flush();
    batch.append(seq.tokens.data(), seq.target_mask.data(), length, 1.0f);
    ++result.sequences;
  }
  flush();
  if (result.tokens == 0) fail("{}: no target tokens to score in the first {} sequences", dataset.describe(), count);
  result.loss /= result.tokens;
  result.perplexity = std::exp(result.loss);
  return result;
}

std::vector<std::int32_t> generate(LoadedModel& model, const std::vector<std::int32_t>& prompt,
                                   const GenerateOptions& options) {
  if (prompt.empty()) fail("generation needs a non-empty prompt");
  // Written so that NaN fails too (every comparison with NaN is false).
  if (!(options.temperature >= 0) || !std::isfinite(options.temperature)) {
    fail("temperature must be a finite number >= 0 (0 = greedy), found {}", options.temperature);
  }
  if (!(options.top_p > 0 && options.top_p <= 1)) fail("top_p must be in (0, 1], found {}", options.top_p);
  if (options.max_new_tokens < 0) fail("max_new_tokens must be >= 0, found {}", options.max_new_tokens);
  const std::int64_t context = model.config().max_position_embeddings;
  if (static_cast<std::int64_t>(prompt.size()) > context) {
    fail("the prompt has {} tokens, more than the model's context of {} (max_position_embeddings); shorten it",
         prompt.size(), context);
  }
  const std::int64_t vocab = model.config().vocab_size;
  for (auto id : prompt) {
    if (id < 0 || id >= vocab) fail("prompt token id {} is outside the model's vocabulary of {}", id, vocab);
  }
  std::vector<std::int32_t> sequence = prompt;
  std::vector<std::int32_t> generated;
  std::mt19937_64 rng(options.seed);
  std::vector<float> logits;
  std::vector<std::int32_t> order(static_cast<std::size_t>(vocab));
  std::vector<double> probs(static_cast<std::size_t>(vocab));
  for (std::int64_t step = 0; step < options.max_new_tokens; ++step) {
    if (static_cast<std::int64_t>(sequence.size()) >= model.config().max_position_embeddings) break;
    model::PackedBatch batch;
    batch.append(sequence.data(), nullptr, static_cast<std::int64_t>(sequence.size()), 0.0f);
    model.forward(batch, &logits);
    const float* last = logits.data() + (sequence.size() - 1) * static_cast<std::size_t>(vocab);
    std::int32_t next = 0;
    if (options.temperature == 0.0) {
      next = static_cast<std::int32_t>(std::max_element(last, last + vocab) - last);
    } else {
      const double top = *std::max_element(last, last + vocab);
      double total = 0.0;
      for (std::int64_t v = 0; v < vocab; ++v) {
        probs[static_cast<std::size_t>(v)] = std::exp((last[v] - top) / options.temperature);
        total += probs[static_cast<std::size_t>(v)];
      }
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
        return probs[static_cast<std::size_t>(a)] > probs[static_cast<std::size_t>(b)];
      });
      // The smallest set of most likely tokens whose mass reaches top_p, renormalized.
      double mass = 0.0;
      std::size_t keep = 0;
      while (keep < order.size() && (keep == 0 || mass < options.top_p * total)) mass += probs[static_cast<std::size_t>(order[keep++])];
      double pick = std::uniform_real_distribution<double>(0.0, mass)(rng);
      next = order[keep - 1];
      for (std::size_t i = 0; i < keep; ++i) {
        pick -= probs[static_cast<std::size_t>(order[i])];
        if (pick <= 0) {
          next = order[i];
          break;
        }
      }
    }
    generated.push_back(next);
    sequence.push_back(next);
    if (std::find(model.eos_token_ids().begin(), model.eos_token_ids().end(), next) != model.eos_token_ids().end()) break;
  }
  return generated;
}

}  // namespace odc::train
