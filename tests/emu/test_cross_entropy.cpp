// cross_entropy.cu executed by the emulator: the per-row kernel (vectorized and scalar paths,
// weight-0 rows, an out-of-range target), sum_f64 and the fused LM-head loss over row chunks
// (whose GEMMs go through the emulated cuBLASLt), against float64 references.
//
// Tolerances: nll / row_loss come from fp32 online softmax over exact bf16 logits: 1e-5
// relative. dlogits are rounded to bf16: 2^-8 relative + 1e-6. The fused loss rounds the logits
// to bf16 first (error up to 2^-9 of each logit, |logit| <= ~4 here; measured 1.4e-4 relative):
// loss within 2e-3 relative; dh, dw are products with rounded dlogits: 1e-2 normwise (measured
// 2.6e-3 and 1.8e-3).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "emu_test_support.h"
#include "odc/kernels/cuda_cross_entropy.h"

namespace kc = odc::kernels::cuda;
using odc_emu_test::Bf16Data;
using odc_emu_test::from_bf16;
using odc_emu_test::normwise_error;
using odc_emu_test::random_bf16;

namespace {

struct RowRef {
  double nll;
  std::vector<double> dlogits;
};

RowRef row_reference(const std::vector<double>& logits, std::int64_t row, std::int64_t vocab,
                     std::int32_t target, double w) {
  double mx = -INFINITY;
  for (std::int64_t j = 0; j < vocab; ++j) mx = std::max(mx, logits[row * vocab + j]);
  double sum = 0.0;
  for (std::int64_t j = 0; j < vocab; ++j) sum += std::exp(logits[row * vocab + j] - mx);
  const double lse = mx + std::log(sum);
  RowRef r{lse - logits[row * vocab + target], std::vector<double>(vocab)};
  for (std::int64_t j = 0; j < vocab; ++j) {
    r.dlogits[j] = w * std::exp(logits[row * vocab + j] - lse) - (j == target ? w : 0.0);
  }
  return r;
}

}  // namespace

TEST_CASE("emu cross entropy: rows with weights, weight 0 and a bad target, both load paths", "[emu][cross_entropy]") {
  for (const std::int64_t vocab : {1000, 1001}) {  // 16-byte vector loads / scalar loads
    const std::int64_t rows = 6;
    const Bf16Data logits = random_bf16(rows * vocab, 8.0f, 30);
    const std::vector<std::int32_t> targets = {3, 999, 0, 500, 1000000, 7};
    const std::vector<float> weights = {1.0f, 0.5f, 0.0f, 2.0f, 1.0f, 0.25f};
    std::vector<std::uint16_t> dlogits(rows * vocab, 0x7fc0);
    std::vector<float> nll(rows);
    std::vector<double> row_loss(rows);
    std::int32_t bad = 0;
    kc::cross_entropy_forward_backward(logits.bits.data(), targets.data(), weights.data(), rows, vocab,
                                       dlogits.data(), nll.data(), row_loss.data(), &bad, nullptr);
    INFO("vocab " << vocab);
    CHECK(bad == 5);  // row 4 (+1): its target is outside the vocabulary
    CHECK(std::isnan(nll[4]));
    CHECK(nll[2] == 0.0f);
    CHECK(row_loss[2] == 0.0);
    int mismatches = 0;
    for (std::int64_t r = 0; r < rows; ++r) {
      if (r == 2 || r == 4) {
        for (std::int64_t j = 0; j < vocab; ++j) mismatches += dlogits[r * vocab + j] != 0;
        continue;
      }
      const RowRef ref = row_reference(logits.values, r, vocab, targets[r], weights[r]);
      mismatches += !(std::fabs(nll[r] - ref.nll) <= 1e-5 * ref.nll + 1e-6);
      mismatches += !(std::fabs(row_loss[r] - weights[r] * ref.nll) <= 1e-5 * weights[r] * ref.nll + 1e-6);
      for (std::int64_t j = 0; j < vocab; ++j) {
        const double want = ref.dlogits[j];
        mismatches += !(std::fabs(from_bf16(dlogits[r * vocab + j]) - want) <= 0x1p-8 * std::fabs(want) + 1e-6);
      }
    }
    CHECK(mismatches == 0);
  }
}

TEST_CASE("emu cross entropy: sum_f64 over more values than threads, and accumulating", "[emu][cross_entropy]") {
  std::vector<double> v(3001);
  double want = 0.0;
  for (std::size_t i = 0; i < v.size(); ++i) want += (v[i] = 1.0 / (1.0 + static_cast<double>(i)));
  double out = 100.0;
  kc::sum_f64(v.data(), static_cast<std::int64_t>(v.size()), &out, false, nullptr);
  CHECK(std::fabs(out - want) <= 1e-12 * want);
  kc::sum_f64(v.data(), static_cast<std::int64_t>(v.size()), &out, true, nullptr);
  CHECK(std::fabs(out - 2 * want) <= 1e-12 * want);
}

TEST_CASE("emu cross entropy: fused LM head over 3-row chunks: loss, dh, dw", "[emu][cross_entropy]") {
  const std::int64_t rows = 7, hidden = 32, vocab = 200;
  const Bf16Data h = random_bf16(rows * hidden, 1.0f, 40), w = random_bf16(vocab * hidden, 0.5f, 41);
  std::vector<std::int32_t> targets(rows);
  std::vector<float> weights(rows);
  for (std::int64_t r = 0; r < rows; ++r) {
    targets[r] = static_cast<std::int32_t>((r * 37) % vocab);
    weights[r] = r == 3 ? 0.0f : 1.0f / 6.0f;
  }
  kc::Blas blas(1 << 20);
  kc::DeviceAllocator allocator;
  std::vector<std::uint16_t> dh(rows * hidden);
  std::vector<float> dw(vocab * hidden, 0.0f);
  kc::FusedCrossEntropyOptions options;
  options.chunk_rows = 3;
  const double loss = kc::lm_head_cross_entropy(blas, allocator, h.bits.data(), w.bits.data(), targets.data(),
                                                weights.data(), rows, hidden, vocab, dh.data(), dw.data(),
                                                options, nullptr);
  std::vector<double> logits(rows * vocab);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t v = 0; v < vocab; ++v) {
      double s = 0.0;
      for (std::int64_t i = 0; i < hidden; ++i) s += h.values[r * hidden + i] * w.values[v * hidden + i];
      logits[r * vocab + v] = s;
    }
  }
  double want_loss = 0.0;
  std::vector<double> dh_ref(rows * hidden, 0.0), dw_ref(vocab * hidden, 0.0);
  for (std::int64_t r = 0; r < rows; ++r) {
    const RowRef ref = row_reference(logits, r, vocab, targets[r], weights[r]);
    want_loss += weights[r] * ref.nll;
    for (std::int64_t v = 0; v < vocab; ++v) {
      for (std::int64_t i = 0; i < hidden; ++i) {
        dh_ref[r * hidden + i] += ref.dlogits[v] * w.values[v * hidden + i];
        dw_ref[v * hidden + i] += ref.dlogits[v] * h.values[r * hidden + i];
      }
    }
  }
  std::vector<double> dh_got(dh.size());
  for (std::size_t i = 0; i < dh.size(); ++i) dh_got[i] = from_bf16(dh[i]);
  INFO("loss " << loss << " want " << want_loss << " dh " << normwise_error(dh_got, dh_ref) << " dw "
               << normwise_error(dw, dw_ref));
  CHECK(std::fabs(loss - want_loss) <= 2e-3 * want_loss);
  CHECK(normwise_error(dh_got, dh_ref) < 1e-2);
  CHECK(normwise_error(dw, dw_ref) < 1e-2);
}
