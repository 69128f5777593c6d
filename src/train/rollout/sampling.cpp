#include "odc/train/rollout/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "odc/core/error.h"

namespace odc::train {

void check_generate_options(const GenerateOptions& options) {
  // Written so that NaN fails too (every comparison with NaN is false).
  if (!(options.temperature >= 0) || !std::isfinite(options.temperature)) {
    fail("temperature must be a finite number >= 0 (0 = greedy), found {}", options.temperature);
  }
  if (!(options.top_p > 0 && options.top_p <= 1)) fail("top_p must be in (0, 1], found {}", options.top_p);
  if (options.max_new_tokens < 0) fail("max_new_tokens must be >= 0, found {}", options.max_new_tokens);
  if (options.top_k < 0) fail("top_k must be >= 0 (0 = off), found {}", options.top_k);
  if (!(options.repetition_penalty > 0) || !std::isfinite(options.repetition_penalty)) {
    fail("repetition_penalty must be a finite number > 0 (1 = off), found {}", options.repetition_penalty);
  }
  for (std::size_t i = 0; i < options.stop.size(); ++i) {
    if (options.stop[i].empty()) fail("stop string {} is empty (every stop string needs at least one character)", i + 1);
  }
}

std::size_t first_non_finite(std::span<const float> logits) {
  const auto bad = std::find_if(logits.begin(), logits.end(), [](float l) { return !std::isfinite(l); });
  return static_cast<std::size_t>(bad - logits.begin());
}

TokenSampler::TokenSampler(const GenerateOptions& options, std::int64_t vocab)
    : options_(options), vocab_(vocab), rng_(options.seed), seen_(static_cast<std::size_t>(vocab), 0),
      order_(static_cast<std::size_t>(vocab)), probs_(static_cast<std::size_t>(vocab)) {
  check_generate_options(options);
  ODC_CHECK(vocab > 0, "a sampler over {} tokens", vocab);
}

void TokenSampler::observe(std::int32_t id) {
  ODC_CHECK(id >= 0 && id < vocab_, "token id {} outside the vocabulary of {}", id, vocab_);
  auto& seen = seen_[static_cast<std::size_t>(id)];
  if (seen == 0) {
    seen = 1;
    seen_ids_.push_back(id);
  }
}

std::int32_t TokenSampler::next(std::span<float> logits) {
  ODC_CHECK(static_cast<std::int64_t>(logits.size()) == vocab_, "{} logits for a vocabulary of {}", logits.size(),
            vocab_);
  if (options_.repetition_penalty != 1.0) {
    const auto penalty = static_cast<float>(options_.repetition_penalty);
    for (const std::int32_t id : seen_ids_) {
      float& l = logits[static_cast<std::size_t>(id)];
      l = l > 0 ? l / penalty : l * penalty;
    }
  }
  if (options_.temperature == 0.0) {
    return static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  return sample(logits);
}

std::int32_t TokenSampler::sample(std::span<const float> logits) {
  const double top = *std::max_element(logits.begin(), logits.end());
  double total = 0.0;
  for (std::int64_t v = 0; v < vocab_; ++v) {
    probs_[static_cast<std::size_t>(v)] = std::exp((logits[static_cast<std::size_t>(v)] - top) / options_.temperature);
  }
  std::iota(order_.begin(), order_.end(), 0);
  auto more_likely = [&](std::int32_t a, std::int32_t b) {
    return probs_[static_cast<std::size_t>(a)] > probs_[static_cast<std::size_t>(b)];
  };
  std::size_t candidates = order_.size();
  if (options_.top_k > 0 && options_.top_k < vocab_) {
    candidates = static_cast<std::size_t>(options_.top_k);
    std::partial_sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(candidates), order_.end(),
                      more_likely);
    for (std::size_t i = 0; i < candidates; ++i) total += probs_[static_cast<std::size_t>(order_[i])];
  } else {
    for (const double p : probs_) total += p;
    std::sort(order_.begin(), order_.end(), more_likely);
  }
  // The smallest set of most likely candidates whose mass reaches top_p, renormalized.
  double mass = 0.0;
  std::size_t keep = 0;
  while (keep < candidates && (keep == 0 || mass < options_.top_p * total)) {
    mass += probs_[static_cast<std::size_t>(order_[keep++])];
  }
  double pick = std::uniform_real_distribution<double>(0.0, mass)(rng_);
  for (std::size_t i = 0; i < keep; ++i) {
    pick -= probs_[static_cast<std::size_t>(order_[i])];
    if (pick <= 0) return order_[i];
  }
  return order_[keep - 1];
}

}  // namespace odc::train
