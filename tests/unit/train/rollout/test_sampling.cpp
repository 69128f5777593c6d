// TokenSampler: the repetition penalty is Hugging Face's (logit / P when positive, logit * P
// otherwise, for every token seen in the prompt or the output, greedy included), top-k restricts
// sampling to the k most likely tokens (before top-p), a seed repeats its draws, every option out
// of range is an error naming it and the value, and the nucleus found from a sorted prefix draws
// exactly what a full sort of the vocabulary draws.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include <catch2/catch.hpp>

#include "odc/core/error.h"
#include "odc/train/rollout/sampling.h"
#include "support/full_sort_sampler.h"

using namespace odc;

namespace {

train::GenerateOptions sampling(double temperature, std::int64_t top_k, double top_p = 1.0) {
  train::GenerateOptions o;
  o.temperature = temperature;
  o.top_k = top_k;
  o.top_p = top_p;
  o.seed = 42;
  return o;
}

// The ids `draws` calls of next() return for the same logits.
std::multiset<std::int32_t> draws(train::TokenSampler& sampler, const std::vector<float>& logits, int n) {
  std::multiset<std::int32_t> out;
  for (int i = 0; i < n; ++i) {
    std::vector<float> copy = logits;
    out.insert(sampler.next(copy));
  }
  return out;
}

}  // namespace

TEST_CASE("sampling: the repetition penalty divides positive and multiplies negative logits of seen tokens",
          "[train][sampling]") {
  train::GenerateOptions o;
  o.repetition_penalty = 2.0;
  train::TokenSampler sampler(o, 5);
  sampler.observe(0);
  sampler.observe(1);
  sampler.observe(0);  // seen twice: penalized once
  std::vector<float> logits = {2.0f, -1.0f, 0.5f, 1.9f, 0.0f};
  CHECK(sampler.next(logits) == 3);  // greedy: 0 wins without the penalty
  CHECK(logits == std::vector<float>{1.0f, -2.0f, 0.5f, 1.9f, 0.0f});

  train::TokenSampler off(train::GenerateOptions{}, 5);
  off.observe(0);
  std::vector<float> same = {2.0f, -1.0f, 0.5f, 1.9f, 0.0f};
  CHECK(off.next(same) == 0);
  CHECK(same[0] == 2.0f);
}

TEST_CASE("sampling: top-k keeps the k most likely tokens, then top-p applies to them", "[train][sampling]") {
  // Nearly flat logits: without top-k every token is drawn.
  const std::vector<float> logits = {0.1f, 0.0f, 0.3f, 0.2f, 0.25f, -0.1f, 0.05f, 0.15f};
  train::TokenSampler all(sampling(1.0, 0), 8);
  const auto every = draws(all, logits, 2000);
  CHECK(std::set<std::int32_t>(every.begin(), every.end()).size() == 8);
  train::TokenSampler top3(sampling(1.0, 3), 8);
  const auto three = draws(top3, logits, 2000);
  CHECK(std::set<std::int32_t>(three.begin(), three.end()) == std::set<std::int32_t>{2, 3, 4});
  train::TokenSampler top1(sampling(5.0, 1), 8);
  const auto one = draws(top1, logits, 200);
  CHECK(one.count(2) == 200);  // top-k 1 is greedy, whatever the temperature
  // Of the top 3 (probabilities about 0.35, 0.33, 0.32 after renormalizing), a top-p of 0.5 keeps 2.
  train::TokenSampler nucleus(sampling(1.0, 3, 0.5), 8);
  const auto two = draws(nucleus, logits, 2000);
  CHECK(std::set<std::int32_t>(two.begin(), two.end()) == std::set<std::int32_t>{2, 4});
  // top-k at or beyond the vocabulary is no restriction: the same draws as off.
  train::TokenSampler big(sampling(1.0, 8), 8), off(sampling(1.0, 0), 8);
  CHECK(draws(big, logits, 300) == draws(off, logits, 300));
}

TEST_CASE("sampling: the same seed repeats its draws, another seed does not", "[train][sampling]") {
  std::vector<float> logits(50);
  for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = 0.05f * static_cast<float>(i % 7);
  auto sequence = [&](std::uint64_t seed) {
    auto o = sampling(1.0, 20, 0.9);
    o.seed = seed;
    train::TokenSampler s(o, 50);
    std::vector<std::int32_t> ids;
    for (int i = 0; i < 64; ++i) {
      std::vector<float> copy = logits;
      ids.push_back(s.next(copy));
    }
    return ids;
  };
  CHECK(sequence(7) == sequence(7));
  CHECK(sequence(7) != sequence(8));
}

TEST_CASE("sampling: options out of range are errors naming the option and the value", "[train][sampling]") {
  auto rejects = [](auto change, const std::string& message) {
    train::GenerateOptions o;
    change(o);
    CHECK_THROWS_WITH(train::check_generate_options(o), Catch::Contains(message));
    CHECK_THROWS_WITH(train::TokenSampler(o, 4), Catch::Contains(message));
  };
  rejects([](auto& o) { o.top_k = -1; }, "top_k must be >= 0 (0 = off), found -1");
  rejects([](auto& o) { o.repetition_penalty = 0; }, "repetition_penalty must be a finite number > 0 (1 = off), found 0");
  rejects([](auto& o) { o.repetition_penalty = -1.5; }, "found -1.5");
  rejects([](auto& o) { o.repetition_penalty = std::numeric_limits<double>::quiet_NaN(); }, "found nan");
  rejects([](auto& o) { o.repetition_penalty = std::numeric_limits<double>::infinity(); }, "found inf");
  rejects([](auto& o) { o.stop = {"ok", ""}; }, "stop string 2 is empty");
  rejects([](auto& o) { o.temperature = std::numeric_limits<double>::quiet_NaN(); }, "temperature must be a finite");
  rejects([](auto& o) { o.top_p = 0; }, "top_p must be in (0, 1], found 0");
  rejects([](auto& o) { o.max_new_tokens = -1; }, "max_new_tokens must be >= 0, found -1");
  train::GenerateOptions fine;
  fine.top_k = 0;
  fine.repetition_penalty = 1e-3;
  fine.stop = {"x"};
  CHECK_NOTHROW(train::check_generate_options(fine));
}


TEST_CASE("sampling: the nucleus from a sorted prefix draws what a full sort draws, ties included", "[train][sampling]") {
  // A vocabulary of 5000 with logits on a coarse grid (bf16-like: many equal probabilities), peaked
  // (a small nucleus) and flat (a nucleus of thousands, past several prefix growths).
  std::mt19937_64 make(3);
  for (const double spread : {8.0, 0.5}) {
    std::vector<float> logits(5000);
    for (auto& l : logits) l = static_cast<float>(std::round(std::normal_distribution<double>(0.0, spread)(make) * 8) / 8);
    for (const std::int64_t top_k : {std::int64_t{0}, std::int64_t{40}, std::int64_t{3000}}) {
      for (const double top_p : {0.3, 0.9, 0.999}) {
        auto o = sampling(0.9, top_k, top_p);
        o.seed = 11;
        train::TokenSampler sampler(o, 5000);
        std::mt19937_64 rng(o.seed);
        std::vector<double> probs(logits.size());
        std::vector<std::int32_t> order(logits.size());
        for (int i = 0; i < 40; ++i) {
          std::vector<float> copy = logits;
          const auto expected = bench::full_sort_draw(logits, o, probs, order, rng);
          CHECK(sampler.next(copy) == expected);
        }
      }
    }
  }
}
