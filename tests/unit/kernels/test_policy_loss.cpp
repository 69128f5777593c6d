// The clipped policy-gradient objective's coefficients (kernels/policy_loss.h): the loss against
// its definition written out here, the coefficient against a central finite difference of that
// loss in logp (through cross-entropy's identity d logp / d logits = onehot - softmax, the
// coefficient is all the backward needs), the clip counts, and rows of weight 0.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "odc/kernels/policy_loss.h"
#include "unit/kernels/kernel_test_support.h"

namespace {

using odc::kernels::PolicyLossParams;
using odc::kernels::PolicyLossSums;
using odc::kernels::cpu::policy_coefficients;

// TRL's per-token loss, in double: -min(r A, clamp(r) A) + beta * k3 (times r when ratio-weighted).
double definition(double logp, double old, double a, double ref, const PolicyLossParams& p) {
  const double r = std::exp(logp - old);
  const double clipped = std::clamp(r, 1.0 - p.clip_low, 1.0 + p.clip_high);
  const double d = ref - logp;
  const double k3 = std::exp(d) - d - 1.0;
  return -std::min(r * a, clipped * a) + p.kl_beta * (p.kl_ratio_weighted ? r * k3 : k3);
}

}  // namespace

TEST_CASE("policy coefficients are minus the weighted slope of the clipped objective in logp", "[kernels][policy]") {
  const int rows = 64;
  PolicyLossParams params{0.2, 0.28, 0.05, true};
  params.kl_ratio_weighted = GENERATE(true, false);
  CAPTURE(params.kl_ratio_weighted);
  const auto logp = odc::kernels::test::random_vector<double>(rows, 1, -4.0, -0.05);
  const auto shift = odc::kernels::test::random_vector<double>(rows, 2, -0.6, 0.6);  // old = logp + shift
  const auto adv = odc::kernels::test::random_vector<double>(rows, 3, -2.0, 2.0);
  const auto ref_shift = odc::kernels::test::random_vector<double>(rows, 4, -0.5, 0.5);
  std::vector<float> nll(rows), old(rows), a(rows), ref(rows), w(rows), coef(rows);
  for (int r = 0; r < rows; ++r) {
    nll[r] = static_cast<float>(-logp[r]);
    old[r] = static_cast<float>(logp[r] + shift[r]);
    a[r] = static_cast<float>(adv[r]);
    ref[r] = static_cast<float>(logp[r] + ref_shift[r]);
    w[r] = r % 7 == 3 ? 0.0f : 0.01f * static_cast<float>(1 + r % 5);
  }
  PolicyLossSums sums;
  policy_coefficients(nll.data(), old.data(), a.data(), ref.data(), w.data(), nullptr, rows, params, coef.data(), sums);
  double loss = 0.0, tokens = 0.0, low = 0.0, high = 0.0, kl = 0.0;
  int clipped_rows = 0;
  for (int r = 0; r < rows; ++r) {
    if (w[r] == 0.0f) {
      CHECK(coef[r] == 0.0f);
      continue;
    }
    // The values as the kernel sees them (floats), in double from here on.
    const double lp = -static_cast<double>(nll[r]);
    const double o = old[r], ad = a[r], rf = ref[r];
    loss += w[r] * definition(lp, o, ad, rf, params);
    tokens += 1.0;
    const double ratio = std::exp(lp - o);
    low += ratio < 0.8 && ad < 0 ? 1.0 : 0.0;
    high += ratio > 1.28 && ad > 0 ? 1.0 : 0.0;
    kl += (params.kl_ratio_weighted ? ratio : 1.0) * (std::exp(rf - lp) - (rf - lp) - 1.0);
    // Central difference of the loss in logp; skip rows within h of a clip boundary (a kink).
    const double h = 1e-6;
    const bool near_kink = std::fabs(ratio - 0.8) < 1e-4 || std::fabs(ratio - 1.28) < 1e-4;
    if (near_kink) continue;
    const double slope = (definition(lp + h, o, ad, rf, params) - definition(lp - h, o, ad, rf, params)) / (2 * h);
    CHECK(coef[r] == Approx(-w[r] * slope).margin(1e-7).epsilon(1e-5));
    // A clipped row's slope is the KL term's alone.
    const double k3 = std::exp(rf - lp) - (rf - lp) - 1.0, dk3 = 1.0 - std::exp(rf - lp);
    const double kl_slope = params.kl_beta * (params.kl_ratio_weighted ? ratio * (k3 + dk3) : dk3);
    if (slope == Approx(kl_slope).margin(1e-9)) ++clipped_rows;
  }
  CHECK(sums.loss == Approx(loss).epsilon(1e-12));
  CHECK(sums.tokens == tokens);
  CHECK(sums.clipped_low == low);
  CHECK(sums.clipped_high == high);
  CHECK(sums.kl == Approx(kl).epsilon(1e-12));
  // The data reach both clip sides and both slopes (a test that only saw one branch proves less).
  CHECK(low > 0);
  CHECK(high > 0);
  CHECK(clipped_rows > 0);
  CHECK(clipped_rows < tokens);
}

TEST_CASE("policy coefficients: at the sampling policy the ratio is 1 and the coefficient is w * A",
          "[kernels][policy]") {
  const std::vector<float> nll{0.5f, 2.0f, 1.25f}, old{-0.5f, -2.0f, -1.25f}, a{1.5f, -0.75f, 0.0f},
      w{0.25f, 0.5f, 1.0f};
  std::vector<float> coef(3);
  PolicyLossSums sums;
  policy_coefficients(nll.data(), old.data(), a.data(), nullptr, w.data(), nullptr, 3, PolicyLossParams{}, coef.data(), sums);
  CHECK(coef[0] == Approx(0.25 * 1.5));
  CHECK(coef[1] == Approx(0.5 * -0.75));
  CHECK(coef[2] == 0.0f);
  CHECK(sums.ratio == Approx(3.0));
  CHECK(sums.ratio_min == Approx(1.0));
  CHECK(sums.ratio_max == Approx(1.0));
  CHECK(sums.kl == 0.0);  // no reference given
  CHECK(sums.loss == Approx(-(0.25 * 1.5 + 0.5 * -0.75)));
}

TEST_CASE("row entropy equals -sum p log p of the softmax", "[kernels][policy]") {
  const int rows = 3, vocab = 257;
  auto logits = odc::kernels::test::random_vector<float>(rows * vocab, 5, -6.0, 6.0);
  std::fill(logits.begin() + 2 * vocab, logits.end(), 3.0f);  // uniform row: log(vocab)
  std::vector<float> out(rows);
  odc::kernels::cpu::row_entropy(logits.data(), rows, vocab, out.data());
  for (int r = 0; r < 2; ++r) {
    double m = -1e300, s = 0.0, h = 0.0;
    for (int j = 0; j < vocab; ++j) m = std::max(m, double(logits[r * vocab + j]));
    for (int j = 0; j < vocab; ++j) s += std::exp(double(logits[r * vocab + j]) - m);
    for (int j = 0; j < vocab; ++j) {
      const double p = std::exp(double(logits[r * vocab + j]) - m) / s;
      h -= p * std::log(p);
    }
    CHECK(out[r] == Approx(h).epsilon(1e-6));
  }
  CHECK(out[2] == Approx(std::log(double(vocab))).epsilon(1e-6));
}
