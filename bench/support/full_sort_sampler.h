#pragma once
// A token drawn as a sampler without shortcuts draws it: softmax(logits / T), a full sort of the
// vocabulary (more likely first, equal probabilities by id; a partial one of top-k), the top-p
// nucleus, the draw. The reference train::TokenSampler is held to (tests/unit/train/rollout) and the
// baseline bench/sampling.cpp times it against. `probs` and `order` are scratch of the logits' size.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "odc/train/rollout/sampling.h"

namespace odc::bench {

inline std::int32_t full_sort_draw(const std::vector<float>& logits, const train::GenerateOptions& o,
                                   std::vector<double>& probs, std::vector<std::int32_t>& order, std::mt19937_64& rng) {
  const double top = *std::max_element(logits.begin(), logits.end());
  for (std::size_t v = 0; v < logits.size(); ++v) probs[v] = std::exp((logits[v] - top) / o.temperature);
  std::iota(order.begin(), order.end(), 0);
  auto more_likely = [&](std::int32_t a, std::int32_t b) {
    const double pa = probs[static_cast<std::size_t>(a)], pb = probs[static_cast<std::size_t>(b)];
    return pa != pb ? pa > pb : a < b;
  };
  std::size_t candidates = order.size();
  double total = 0.0;
  if (o.top_k > 0 && o.top_k < static_cast<std::int64_t>(order.size())) {
    candidates = static_cast<std::size_t>(o.top_k);
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(candidates), order.end(), more_likely);
    for (std::size_t i = 0; i < candidates; ++i) total += probs[static_cast<std::size_t>(order[i])];
  } else {
    for (const double p : probs) total += p;
    std::sort(order.begin(), order.end(), more_likely);
  }
  double mass = 0.0;
  std::size_t keep = 0;
  while (keep < candidates && (keep == 0 || mass < o.top_p * total)) mass += probs[static_cast<std::size_t>(order[keep++])];
  double pick = std::uniform_real_distribution<double>(0.0, mass)(rng);
  for (std::size_t i = 0; i < keep; ++i) {
    pick -= probs[static_cast<std::size_t>(order[i])];
    if (pick <= 0) return order[i];
  }
  return order[keep - 1];
}

}  // namespace odc::bench
