// Weighted cross-entropy: loss and per-row nll against a naive double loop (with logits far from
// zero), dlogits against central finite differences in double, weight-0 rows, in-place dlogits.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "odc/kernels/cross_entropy.h"
#include "unit/kernels/kernel_test_support.h"

namespace {

using namespace odc::kernels::cpu;
using namespace odc::kernels::test;

double reference_nll(const std::vector<double>& logits, int row, int vocab, int target) {
  // log-sum-exp with the max subtracted: the textbook formula, in double.
  double m = -std::numeric_limits<double>::infinity();
  for (int j = 0; j < vocab; ++j) m = std::max(m, logits[row * vocab + j]);
  double s = 0;
  for (int j = 0; j < vocab; ++j) s += std::exp(logits[row * vocab + j] - m);
  return m + std::log(s) - logits[row * vocab + target];
}

}  // namespace

TEST_CASE("cross entropy loss and nll match the definition, weight-0 rows contribute nothing",
          "[kernels][cross_entropy]") {
  const int rows = 5, vocab = 1001;  // odd vocab: vector tail
  auto logits = random_vector(rows * vocab, 1, -8.0, 8.0);
  // Row 1 sits at +1000: a naive exp would overflow; the max shift must keep it exact.
  for (int j = 0; j < vocab; ++j) logits[vocab + j] += 1000.0;
  // Row 3 has weight 0 and an invalid target, which must not be read.
  const std::vector<std::int32_t> targets = {0, 17, 1000, -100, 500};
  const std::vector<float> weights = {1.0f, 0.5f, 2.0f, 0.0f, 1.0f};
  double ref_total = 0;
  std::vector<double> ref_nll(rows, 0.0);
  for (int r = 0; r < rows; ++r) {
    if (weights[r] == 0.0f) continue;
    ref_nll[r] = reference_nll(logits, r, vocab, targets[r]);
    ref_total += weights[r] * ref_nll[r];
  }

  const auto lf = convert<float>(logits);
  std::vector<float> nllf(rows, -1.0f);
  const double total_f = cross_entropy_forward_backward<float>(
      lf.data(), targets.data(), weights.data(), rows, vocab, nullptr, nllf.data());
  // Float logits carry an absolute rounding of up to 1000 * 6e-8 = 6e-5 on row 1 (input
  // rounding, not kernel error), so compare against the reference on the float-rounded logits.
  const auto rounded = convert<double>(lf);
  double rounded_total = 0;
  for (int r = 0; r < rows; ++r) {
    if (weights[r] == 0.0f) {
      CHECK(nllf[r] == 0.0f);
      continue;
    }
    const double want = reference_nll(rounded, r, vocab, targets[r]);
    rounded_total += weights[r] * want;
    // Exp within 2 ulp, sums in double, one log: the nll (~7) is good to ~1e-6 absolute.
    CHECK(nllf[r] == Approx(want).margin(2e-6));
  }
  CHECK(total_f == Approx(rounded_total).margin(1e-5));

  std::vector<double> nlld(rows, -1.0);
  const double total_d = cross_entropy_forward_backward<double>(
      logits.data(), targets.data(), weights.data(), rows, vocab, nullptr, nlld.data());
  CHECK(total_d == Approx(ref_total).epsilon(1e-14));
  CHECK(max_abs_diff(nlld, ref_nll) < 1e-12);
}

TEST_CASE("cross entropy dlogits match central finite differences in double",
          "[kernels][cross_entropy]") {
  const int rows = 4, vocab = 13;
  auto logits = random_vector(rows * vocab, 2, -3.0, 3.0);
  const std::vector<std::int32_t> targets = {3, 12, 7, 0};
  const std::vector<float> weights = {1.0f, 0.0f, 0.25f, 3.0f};
  auto loss = [&] {
    return cross_entropy_forward_backward<double>(logits.data(), targets.data(), weights.data(),
                                                  rows, vocab, nullptr, nullptr);
  };
  std::vector<double> dlogits(logits.size(), std::nan(""));
  cross_entropy_forward_backward<double>(logits.data(), targets.data(), weights.data(), rows, vocab,
                                         dlogits.data(), nullptr);
  CHECK(gradient_error(dlogits, logits, loss) < 1e-6);
  // The weight-0 row's gradient is exactly zero; every other row's gradient sums to zero.
  for (int j = 0; j < vocab; ++j) CHECK(dlogits[vocab + j] == 0.0);
  for (int r : {0, 2, 3}) {
    double s = 0;
    for (int j = 0; j < vocab; ++j) s += dlogits[r * vocab + j];
    CHECK(std::fabs(s) < 1e-15);
  }

  SECTION("dlogits may alias logits, giving identical results") {
    const auto lf = convert<float>(logits);
    std::vector<float> separate(lf.size());
    const double total_separate = cross_entropy_forward_backward<float>(
        lf.data(), targets.data(), weights.data(), rows, vocab, separate.data(), nullptr);
    auto in_place = lf;
    const double total_in_place = cross_entropy_forward_backward<float>(
        in_place.data(), targets.data(), weights.data(), rows, vocab, in_place.data(), nullptr);
    CHECK(total_in_place == total_separate);
    CHECK(in_place == separate);
    // Float gradient vs double: softmax entries within a few ulp of values <= weight (3).
    CHECK(relative_error(separate, dlogits) < 1e-6);
  }
}
