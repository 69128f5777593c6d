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

std::size_t TokenSampler::nucleus_bound(std::span<const float> logits, double top, double target) {
  // Buckets of equal width in log-probability (most likely first), their mass and counts in one
  // pass; the nucleus ends in the bucket where the running mass reaches the target, so the tokens
  // of that bucket and the ones before bound it (equal probabilities share a bucket).
  constexpr std::size_t kBuckets = 4096;
  const double low = *std::min_element(logits.begin(), logits.end());
  if (!(top > low)) return static_cast<std::size_t>(vocab_);
  bucket_mass_.assign(kBuckets, 0.0);
  bucket_count_.assign(kBuckets, 0);
  const double scale = static_cast<double>(kBuckets) / (top - low);
  for (std::int64_t v = 0; v < vocab_; ++v) {
    const auto at = static_cast<std::size_t>((top - logits[static_cast<std::size_t>(v)]) * scale);
    const std::size_t b = std::min(at, kBuckets - 1);
    bucket_mass_[b] += probs_[static_cast<std::size_t>(v)];
    ++bucket_count_[b];
  }
  double mass = 0.0;
  std::size_t count = 0;
  for (std::size_t b = 0; b < kBuckets; ++b) {
    mass += bucket_mass_[b];
    count += bucket_count_[b];
    if (mass >= target) return std::max<std::size_t>(count, 1);
  }
  return static_cast<std::size_t>(vocab_);
}

std::int32_t TokenSampler::sample(std::span<const float> logits) {
  const double top = *std::max_element(logits.begin(), logits.end());
  for (std::int64_t v = 0; v < vocab_; ++v) {
    probs_[static_cast<std::size_t>(v)] = std::exp((logits[static_cast<std::size_t>(v)] - top) / options_.temperature);
  }
  const bool top_k = options_.top_k > 0 && options_.top_k < vocab_;
  if (!top_k && options_.top_p >= 1.0) {
    // The whole softmax: no order needed, the draw scans the ids in order.
    double total = 0.0;
    for (const double p : probs_) total += p;
    double pick = std::uniform_real_distribution<double>(0.0, total)(rng_);
    for (std::int64_t v = 0; v < vocab_; ++v) {
      pick -= probs_[static_cast<std::size_t>(v)];
      if (pick <= 0) return static_cast<std::int32_t>(v);
    }
    return static_cast<std::int32_t>(vocab_ - 1);
  }
  // More likely first; equal probabilities (frequent with bf16 logits) by id, so that the order is
  // one total order and any prefix sorted alone is the full sort's prefix. Sorted as (probability,
  // id) pairs side by side, not ids looking their probabilities up.
  for (std::int64_t v = 0; v < vocab_; ++v) {
    order_[static_cast<std::size_t>(v)] = {probs_[static_cast<std::size_t>(v)], static_cast<std::int32_t>(v)};
  }
  auto more_likely = [](const Candidate& a, const Candidate& b) { return a.p != b.p ? a.p > b.p : a.id < b.id; };
  // The `count` most likely, sorted, at the front (the others after them in no order): a heap for a
  // few, a selection then a sort for more, one sort near the whole vocabulary.
  auto sort_prefix = [&](std::size_t count) {
    const auto middle = order_.begin() + static_cast<std::ptrdiff_t>(count);
    if (count * 4 >= order_.size()) {
      std::sort(order_.begin(), order_.end(), more_likely);
    } else if (count <= 1024) {
      std::partial_sort(order_.begin(), middle, order_.end(), more_likely);
    } else {
      std::nth_element(order_.begin(), middle, order_.end(), more_likely);
      std::sort(order_.begin(), middle, more_likely);
    }
  };
  double total = 0.0;
  std::size_t sorted = 0;
  if (top_k) {
    sorted = static_cast<std::size_t>(options_.top_k);
    sort_prefix(sorted);
    for (std::size_t i = 0; i < sorted; ++i) total += order_[i].p;
  } else {
    for (const double p : probs_) total += p;
    sorted = std::min(order_.size(), nucleus_bound(logits, top, options_.top_p * total));
    sort_prefix(sorted);
  }
  // The smallest set of most likely candidates whose mass reaches top_p, renormalized. The bound
  // sums the mass in another order: should rounding leave the nucleus one token past it, sort more.
  double mass = 0.0;
  std::size_t keep = 0;
  for (;;) {
    while (keep < sorted && (keep == 0 || mass < options_.top_p * total)) {
      mass += order_[keep++].p;
    }
    if (top_k || keep < sorted || mass >= options_.top_p * total || sorted == order_.size()) break;
    sorted = std::min(order_.size(), sorted * 2);
    sort_prefix(sorted);  // the prefix sorted so far stays in place: keep and mass hold
  }
  double pick = std::uniform_real_distribution<double>(0.0, mass)(rng_);
  for (std::size_t i = 0; i < keep; ++i) {
    pick -= order_[i].p;
    if (pick <= 0) return order_[i].id;
  }
  return order_[keep - 1].id;
}

}  // namespace odc::train
