// CUDA cross-entropy and the fused LM head + cross-entropy (cuda_cross_entropy.h) against the CPU
// kernels (cross_entropy.h, matmul.h) on the same bf16-rounded inputs. Needs a GPU.
//
// Tolerances:
//  - loss (unfused): 1e-3 relative. Same bf16 logits on both sides; the GPU keeps the softmax
//    statistics in fp32 (exp sums of up to 32000 terms, tree-reduced) where the CPU sums in
//    double: ~1e-6 relative in practice, the bound leaves room for __expf's approximation.
//  - loss (fused): 1e-3 relative. The GPU rounds the chunk logits to bf16 (as PyTorch's bf16
//    lm_head does) while the CPU reference keeps fp32 logits: a per-row error of ~0.2% of |logit|
//    with random sign, averaging down over the rows to well below 1e-3 of the total.
//  - nll per row: 1e-2 relative (check_close), fp32 lse - target on bf16 logits.
//  - dlogits, dh, dW: cosine >= 0.999 and ||gpu - ref|| / ||ref|| <= 1e-2 (check_grad). dlogits
//    are rounded to bf16 (~1.1e-3 normwise); in the fused path the logits (std ~2.4) are rounded
//    to bf16 first, which moves each probability by ~2^-9 * |logit| relative (~3e-3 normwise):
//    correct results sit near 3e-3, 1e-2 leaves ~3x.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "odc/core/dtype.h"
#include "odc/core/error.h"
#include "odc/kernels/cross_entropy.h"
#include "odc/kernels/cuda_cross_entropy.h"
#include "odc/kernels/cuda_device.h"
#include "odc/kernels/cuda_gemm.h"
#include "odc/kernels/matmul.h"

#include "cuda_test_support.h"

using namespace odc::test::cuda;
namespace cu = odc::kernels::cuda;
namespace cpu = odc::kernels::cpu;

namespace {

constexpr std::uint16_t kNanBits = 0x7fc0;
constexpr std::int32_t kIgnoreIndex = -100;  // targets of masked rows: must never be read

struct Targets {
  std::vector<std::int32_t> ids;
  std::vector<float> weights;
  std::int64_t weighted = 0;
};

// Random targets; about a quarter of the rows masked (weight 0, target -100), the others weighted
// by `scale` (1 / the weighted count when mean = true, else random in [0.5, 1.5)).
Targets random_targets(std::int64_t rows, std::int64_t vocab, std::mt19937& rng, bool mean) {
  std::uniform_int_distribution<std::int32_t> pick(0, std::int32_t(vocab - 1));
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  Targets t;
  t.ids.resize(rows);
  t.weights.resize(rows);
  for (std::int64_t r = 0; r < rows; ++r) {
    const bool masked = unit(rng) < 0.25f && r != 0;
    t.ids[r] = masked ? kIgnoreIndex : pick(rng);
    t.weights[r] = masked ? 0.0f : 0.5f + unit(rng);
    if (!masked) ++t.weighted;
  }
  t.ids[rows - 1] = std::int32_t(vocab - 1);  // the last class is reachable
  if (t.weights[rows - 1] == 0.0f) {
    t.weights[rows - 1] = 1.0f;
    ++t.weighted;
  }
  if (mean) {
    for (auto& w : t.weights) w = w != 0.0f ? 1.0f / float(t.weighted) : 0.0f;
  }
  return t;
}

void check_loss(const char* what, double gpu, double ref, double rel) {
  std::printf("[cuda] %-34s gpu=%.9g ref=%.9g rel_err=%.3e\n", what, gpu, ref,
              std::fabs(gpu - ref) / std::max(1e-30, std::fabs(ref)));
  INFO(what << ": gpu " << gpu << " ref " << ref);
  CHECK(std::isfinite(gpu));
  CHECK(std::fabs(gpu - ref) <= rel * std::fabs(ref));
}

}  // namespace

TEST_CASE("cross_entropy_forward_backward matches the CPU kernel", "[cuda][cross_entropy]") {
  std::mt19937 rng(31);
  cu::DeviceAllocator alloc;
  struct Shape {
    std::int64_t rows, vocab;
  };
  // vocab 1001: the scalar path (not a multiple of 8); 1000 and 32000: the 16-byte vector path.
  for (Shape s : {Shape{37, 1000}, Shape{19, 1001}, Shape{64, 32000}}) {
    INFO("rows=" << s.rows << " vocab=" << s.vocab);
    const std::int64_t n = s.rows * s.vocab;
    auto logits = random_bf16(n, rng, 3.0f);
    const auto t = random_targets(s.rows, s.vocab, rng, false);
    std::vector<float> dref(n), nll_ref(s.rows);
    const double loss_ref = cpu::cross_entropy_forward_backward<float>(
        logits.f.data(), t.ids.data(), t.weights.data(), s.rows, s.vocab, dref.data(),
        nll_ref.data());

    auto d_logits = to_device(alloc, logits.bits);
    auto d_ids = to_device(alloc, t.ids);
    auto d_weights = to_device(alloc, t.weights);
    auto d_dlogits = to_device(alloc, Bits(n, kNanBits));
    cu::DeviceBuffer d_nll(alloc, s.rows * 4), d_rows(alloc, s.rows * 8), d_loss(alloc, 8);
    auto d_bad = to_device(alloc, std::vector<std::int32_t>{0});
    cu::cross_entropy_forward_backward(d_logits.as<std::uint16_t>(), d_ids.as<std::int32_t>(),
                                       d_weights.as<float>(), s.rows, s.vocab,
                                       d_dlogits.as<std::uint16_t>(), d_nll.as<float>(),
                                       d_rows.as<double>(), d_bad.as<std::int32_t>(), nullptr);
    cu::sum_f64(d_rows.as<double>(), s.rows, d_loss.as<double>(), false, nullptr);
    check_loss("cross_entropy loss", from_device<double>(d_loss, 1)[0], loss_ref, 1e-3);
    check_close("cross_entropy nll", from_device<float>(d_nll, s.rows), nll_ref, 1e-2);
    const auto dl = to_f32(from_device<std::uint16_t>(d_dlogits, n));
    check_grad("cross_entropy dlogits", dl, dref);
    CHECK(from_device<std::int32_t>(d_bad, 1)[0] == 0);
    // Masked rows: zero gradient, zero loss (their target -100 was not read).
    const auto nll = from_device<float>(d_nll, s.rows);
    for (std::int64_t r = 0; r < s.rows; ++r) {
      if (t.weights[r] != 0.0f) continue;
      CHECK(nll[r] == 0.0f);
      bool zero = true;
      for (std::int64_t j = 0; j < s.vocab; ++j) zero = zero && dl[r * s.vocab + j] == 0.0f;
      CHECK(zero);
    }

    // In place (dlogits == logits), loss accumulated onto the previous sum.
    cu::cross_entropy_forward_backward(d_logits.as<std::uint16_t>(), d_ids.as<std::int32_t>(),
                                       d_weights.as<float>(), s.rows, s.vocab,
                                       d_logits.as<std::uint16_t>(), nullptr, d_rows.as<double>(),
                                       nullptr, nullptr);
    cu::sum_f64(d_rows.as<double>(), s.rows, d_loss.as<double>(), true, nullptr);
    check_loss("cross_entropy loss (in place, x2)", from_device<double>(d_loss, 1)[0],
               2.0 * loss_ref, 1e-3);
    check_grad("cross_entropy dlogits (in place)",
               to_f32(from_device<std::uint16_t>(d_logits, n)), dref);
  }
}

TEST_CASE("cross_entropy flags a weighted row whose target is out of range", "[cuda][cross_entropy]") {
  std::mt19937 rng(3);
  cu::DeviceAllocator alloc;
  const std::int64_t rows = 6, vocab = 40;
  auto logits = random_bf16(rows * vocab, rng);
  std::vector<std::int32_t> ids = {1, 2, kIgnoreIndex, 3, 4, 5};
  std::vector<float> weights = {1, 1, 0, 1, 1, 1};
  ids[4] = std::int32_t(vocab);  // row 4: weighted and out of range
  auto d_logits = to_device(alloc, logits.bits), d_ids = to_device(alloc, ids);
  auto d_weights = to_device(alloc, weights);
  auto d_bad = to_device(alloc, std::vector<std::int32_t>{0});
  cu::DeviceBuffer d_nll(alloc, rows * 4);
  cu::cross_entropy_forward_backward(d_logits.as<std::uint16_t>(), d_ids.as<std::int32_t>(),
                                     d_weights.as<float>(), rows, vocab, nullptr,
                                     d_nll.as<float>(), nullptr, d_bad.as<std::int32_t>(), nullptr);
  CHECK(from_device<std::int32_t>(d_bad, 1)[0] == 4 + 1);
  const auto nll = from_device<float>(d_nll, rows);
  CHECK(std::isnan(nll[4]));
  CHECK(nll[2] == 0.0f);
  CHECK(std::isfinite(nll[0]));

  // The fused, synchronous path throws naming the row and the target.
  cu::Blas blas;
  const std::int64_t hidden = 16;
  auto h = random_bf16(rows * hidden, rng), w = random_bf16(vocab * hidden, rng);
  auto d_h = to_device(alloc, h.bits), d_w = to_device(alloc, w.bits);
  cu::DeviceBuffer d_dh(alloc, rows * hidden * 2), d_dw(alloc, vocab * hidden * 4);
  try {
    cu::lm_head_cross_entropy(blas, alloc, d_h.as<std::uint16_t>(), d_w.as<std::uint16_t>(),
                              d_ids.as<std::int32_t>(), d_weights.as<float>(), rows, hidden, vocab,
                              d_dh.as<std::uint16_t>(), d_dw.as<float>(), {}, nullptr);
    FAIL("no throw");
  } catch (const odc::Error& e) {
    const std::string message = e.what();
    INFO(message);
    CHECK(message.find("row 4") != std::string::npos);
    CHECK(message.find("target 40") != std::string::npos);
  }
}

TEST_CASE("fused LM head + cross-entropy matches linear + cross_entropy + linear_backward",
          "[cuda][cross_entropy][fused]") {
  std::mt19937 rng(77);
  cu::DeviceAllocator alloc;
  cu::Blas blas;
  struct Case {
    std::int64_t rows, hidden, vocab, chunk_rows;
    std::size_t budget;
  };
  const std::size_t kDefaultBudget = cu::FusedCrossEntropyOptions{}.logits_budget_bytes;
  // Chunk sizes that do not divide the rows (300 = 2 x 128 + 44; 200 = 2 x 96 + 8), a single
  // chunk, and a budget-derived chunk (70 rows of 32000 bf16 logits -> 64 rows; 200 = 3 x 64 + 8).
  for (Case c : {Case{300, 128, 1000, 128, kDefaultBudget}, Case{300, 128, 1000, 0, kDefaultBudget},
                 Case{200, 256, 32000, 96, kDefaultBudget},
                 Case{200, 256, 32000, 0, std::size_t(70) * 32000 * 2}}) {
    cu::FusedCrossEntropyOptions options;
    options.chunk_rows = c.chunk_rows;
    options.logits_budget_bytes = c.budget;
    const std::int64_t chunk = cu::fused_cross_entropy_chunk_rows(c.rows, c.vocab, options);
    INFO("rows=" << c.rows << " hidden=" << c.hidden << " vocab=" << c.vocab << " chunk=" << chunk);
    if (c.chunk_rows > 0) CHECK(chunk == c.chunk_rows);
    if (c.chunk_rows == 0 && c.budget != kDefaultBudget) CHECK(chunk == 64);

    auto h = random_bf16(c.rows * c.hidden, rng);
    // Logits of std ~2.4 (sqrt(hidden) * scale): a realistic, non-uniform softmax.
    auto w = random_bf16(c.vocab * c.hidden, rng, 2.4f / std::sqrt(float(c.hidden)));
    const auto t = random_targets(c.rows, c.vocab, rng, true);

    // CPU reference in fp32: logits = h W^T, CE, then the backward of the linear layer.
    std::vector<float> logits(c.rows * c.vocab), dh_ref(c.rows * c.hidden),
        dw_ref(c.vocab * c.hidden, 0.0f);
    cpu::linear_forward<float>(h.f.data(), w.f.data(), nullptr, logits.data(), c.rows, c.hidden,
                               c.vocab);
    const double loss_ref = cpu::cross_entropy_forward_backward<float>(
        logits.data(), t.ids.data(), t.weights.data(), c.rows, c.vocab, logits.data(), nullptr);
    cpu::linear_backward<float>(logits.data(), h.f.data(), w.f.data(), dh_ref.data(),
                                dw_ref.data(), nullptr, c.rows, c.hidden, c.vocab, false);

    auto d_h = to_device(alloc, h.bits), d_w = to_device(alloc, w.bits);
    auto d_ids = to_device(alloc, t.ids);
    auto d_weights = to_device(alloc, t.weights);
    auto d_dh = to_device(alloc, Bits(c.rows * c.hidden, kNanBits));  // overwritten
    auto d_dw = to_device(alloc, std::vector<float>(c.vocab * c.hidden, 0.0f));
    cu::Stream stream;
    // The uploads ran on the legacy stream, which a non-blocking stream does not wait for.
    cu::device_synchronize();
    const double loss = cu::lm_head_cross_entropy(
        blas, alloc, d_h.as<std::uint16_t>(), d_w.as<std::uint16_t>(), d_ids.as<std::int32_t>(),
        d_weights.as<float>(), c.rows, c.hidden, c.vocab, d_dh.as<std::uint16_t>(),
        d_dw.as<float>(), options, stream.handle());
    check_loss("fused lm_head+CE loss", loss, loss_ref, 1e-3);
    const auto dh = to_f32(from_device<std::uint16_t>(d_dh, c.rows * c.hidden));
    check_grad("fused lm_head+CE dh", dh, dh_ref);
    check_grad("fused lm_head+CE dW", from_device<float>(d_dw, c.vocab * c.hidden), dw_ref);
    // Masked rows: exactly zero dh (their dlogits are zero).
    for (std::int64_t r = 0; r < c.rows; ++r) {
      if (t.weights[r] != 0.0f) continue;
      bool zero = true;
      for (std::int64_t j = 0; j < c.hidden; ++j) zero = zero && dh[r * c.hidden + j] == 0.0f;
      CHECK(zero);
    }

    // dW accumulates: a second call doubles it; the loss is the same; dh is overwritten, not added.
    const double loss2 = cu::lm_head_cross_entropy(
        blas, alloc, d_h.as<std::uint16_t>(), d_w.as<std::uint16_t>(), d_ids.as<std::int32_t>(),
        d_weights.as<float>(), c.rows, c.hidden, c.vocab, d_dh.as<std::uint16_t>(),
        d_dw.as<float>(), options, stream.handle());
    // The same cached GEMM algorithm and a fixed-order reduction: equal up to a split-k GEMM's
    // possible atomic ordering in the logits.
    CHECK(loss2 == Approx(loss).epsilon(1e-6));
    std::vector<float> dw2_ref = dw_ref;
    for (auto& v : dw2_ref) v *= 2.0f;
    check_grad("fused lm_head+CE dW (accumulated x2)", from_device<float>(d_dw, c.vocab * c.hidden),
               dw2_ref);
    check_grad("fused lm_head+CE dh (second call)",
               to_f32(from_device<std::uint16_t>(d_dh, c.rows * c.hidden)), dh_ref);

    // Forward only (no gradients wanted): the same loss.
    const double loss_fwd = cu::lm_head_cross_entropy(
        blas, alloc, d_h.as<std::uint16_t>(), d_w.as<std::uint16_t>(), d_ids.as<std::int32_t>(),
        d_weights.as<float>(), c.rows, c.hidden, c.vocab, nullptr, nullptr, options,
        stream.handle());
    CHECK(loss_fwd == Approx(loss).epsilon(1e-6));
  }

  // Every row masked: loss 0, dh 0, dW unchanged.
  const std::int64_t rows = 10, hidden = 32, vocab = 100;
  auto h = random_bf16(rows * hidden, rng), w = random_bf16(vocab * hidden, rng);
  std::vector<std::int32_t> ids(rows, kIgnoreIndex);
  std::vector<float> weights(rows, 0.0f);
  auto dw0 = random_f32(vocab * hidden, rng);
  auto d_h = to_device(alloc, h.bits), d_w = to_device(alloc, w.bits);
  auto d_ids = to_device(alloc, ids), d_weights = to_device(alloc, weights);
  auto d_dh = to_device(alloc, Bits(rows * hidden, kNanBits));
  auto d_dw = to_device(alloc, dw0);
  const double loss = cu::lm_head_cross_entropy(
      blas, alloc, d_h.as<std::uint16_t>(), d_w.as<std::uint16_t>(), d_ids.as<std::int32_t>(),
      d_weights.as<float>(), rows, hidden, vocab, d_dh.as<std::uint16_t>(), d_dw.as<float>(), {},
      nullptr);
  CHECK(loss == 0.0);
  CHECK(to_f32(from_device<std::uint16_t>(d_dh, rows * hidden)) ==
        std::vector<float>(rows * hidden, 0.0f));
  CHECK(from_device<float>(d_dw, vocab * hidden) == dw0);
}
