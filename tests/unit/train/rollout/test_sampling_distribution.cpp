// TokenSampler's draws follow the distribution the options define: softmax(logits / T), cut to the
// top-k tokens, then to the smallest most-likely set whose mass reaches top-p, renormalized. A
// chi-square goodness-of-fit test on 200,000 draws per setting against that distribution computed
// here from its definition, at a false-alarm rate of 1e-6 per setting (the critical value from the
// Wilson-Hilferty approximation of the chi-square quantile, accurate to well under 1% at these
// degrees of freedom); the same counts against a slightly different distribution (temperature
// off by 10%) must exceed it, so the test has the power to see a wrong sampler.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include <catch2/catch.hpp>

#include "odc/train/rollout/sampling.h"

using namespace odc;

namespace {

// The distribution of the definition above, in double.
std::vector<double> expected(const std::vector<float>& logits, double temperature, std::int64_t top_k, double top_p) {
  const auto n = logits.size();
  const double top = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(n);
  for (std::size_t i = 0; i < n; ++i) p[i] = std::exp((logits[i] - top) / temperature);
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return p[a] > p[b]; });
  const std::size_t k = top_k > 0 ? std::min<std::size_t>(static_cast<std::size_t>(top_k), n) : n;
  double total = 0.0;
  for (std::size_t i = 0; i < k; ++i) total += p[order[i]];
  std::vector<double> out(n, 0.0);
  double mass = 0.0;
  for (std::size_t i = 0; i < k && (i == 0 || mass < top_p * total); ++i) {
    out[order[i]] = p[order[i]];
    mass += p[order[i]];
  }
  for (auto& x : out) x /= mass;
  return out;
}

// Pearson's statistic of `counts` against `probs` (over the support of probs), and its degrees of
// freedom; a draw outside the support makes it infinite.
std::pair<double, int> chi_square(const std::vector<std::int64_t>& counts, const std::vector<double>& probs,
                                  double draws) {
  double stat = 0.0;
  int support = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    if (probs[i] == 0.0) {
      if (counts[i] > 0) return {INFINITY, 0};
      continue;
    }
    ++support;
    const double e = probs[i] * draws;
    stat += (static_cast<double>(counts[i]) - e) * (static_cast<double>(counts[i]) - e) / e;
  }
  return {stat, support - 1};
}

// The chi-square quantile with `df` degrees of freedom whose upper tail is 1e-6 (z = 4.7534).
double critical_value(int df) {
  const double z = 4.753424308822899;
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

}  // namespace

TEST_CASE("sampling: draws follow softmax(logits / T) cut by top-k and top-p (chi-square, alpha 1e-6)",
          "[train][sampling]") {
  std::vector<float> logits(40);
  for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(std::sin(1.7 * i) * 2.0 + 0.03 * i);
  struct Setting {
    double temperature;
    std::int64_t top_k;
    double top_p;
  };
  const auto setting = GENERATE(Setting{1.0, 0, 1.0}, Setting{0.7, 0, 1.0}, Setting{1.3, 12, 1.0},
                                Setting{1.0, 0, 0.8}, Setting{0.9, 20, 0.9});
  CAPTURE(setting.temperature, setting.top_k, setting.top_p);
  train::GenerateOptions o;
  o.temperature = setting.temperature;
  o.top_k = setting.top_k;
  o.top_p = setting.top_p;
  o.seed = 2026;
  train::TokenSampler sampler(o, static_cast<std::int64_t>(logits.size()));
  const int draws = 200000;
  std::vector<std::int64_t> counts(logits.size(), 0);
  for (int i = 0; i < draws; ++i) {
    std::vector<float> copy = logits;
    ++counts[static_cast<std::size_t>(sampler.next(copy))];
  }
  const auto [stat, df] = chi_square(counts, expected(logits, setting.temperature, setting.top_k, setting.top_p), draws);
  REQUIRE(df >= 2);
  CAPTURE(stat, df, critical_value(df));
  CHECK(stat < critical_value(df));
  // Power: against the temperature off by 10% the same counts fail.
  const auto [wrong, wrong_df] =
      chi_square(counts, expected(logits, setting.temperature * 1.1, setting.top_k, setting.top_p), draws);
  CAPTURE(wrong);
  CHECK(wrong > critical_value(wrong_df));
}
