// The policy objective's CUDA kernels (cuda_policy_loss.h) against the CPU kernels
// (policy_loss.h) on the same inputs: coefficients and sums over chunks accumulated on the device,
// repeated bit for bit, and row entropies of bf16 logits at a real vocabulary. Needs a GPU.
//
// Bounds (the emulator shows the coefficients bitwise equal with the host's exp,
// tests/emu/test_policy_loss.cpp; here only the device's exp differs):
//  - exp: CUDA's double exp is within 1 ulp of the true value and glibc's within 0.52 ulp, so the
//    two are the same double or its neighbour: each ratio and exp(d) within 2^-52 relative.
//  - coefficients: without the KL term the double coefficient then differs by a few 2^-53
//    relative, which rounds to the same float or a neighbour; the division by T and its rounding
//    make that at most 3 float ulp: 2^-21 |coef|. The KL slope r (k3 + dk3) cancels
//    (e^d - d - 1) + (1 - e^d) = -d: an ulp of e^d is an absolute 2^-52 (e^d + |d| + 1) there,
//    with the roundings around it 2^-48 (e^d + |d| + 1) (16x); times w beta r / T.
//  - sums: each order is within (n - 1) 2^-53 of sum|term|, and each term moves by the exp ulps
//    above (a few 2^-53 of its scale): 2^-53 (2n + 8) sum(scale), scale >= |term| per row.
//    Counts are exact; ratio min and max within 2^-52 relative.
//  - entropy: fp32 exponentials (expf, within 2 ulp), double sums of same-signed terms, as the
//    emulator test argues: within 1e-6 (1 + H).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "odc/core/dtype.h"
#include "odc/kernels/cuda_device.h"
#include "odc/kernels/cuda_policy_loss.h"
#include "odc/kernels/policy_loss.h"

#include "cuda_test_support.h"

using namespace odc::test::cuda;
namespace cu = odc::kernels::cuda;
using odc::kernels::PolicyLossParams;
using odc::kernels::PolicyLossSums;

namespace {

struct Rows {
  std::vector<float> nll, old_logp, advantages, ref_logp, weights, entropy;
};

// As the emulator test, plus rows of a confident policy (nll near 0: d = ref - logp down to a few
// 1e-12, where the KL slope's cancellation is worst).
Rows random_rows(std::int64_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Rows r;
  for (std::int64_t i = 0; i < n; ++i) {
    const bool confident = i % 7 == 2;
    const float nll = confident ? 1e-4f * unit(rng) : 8.0f * unit(rng) * unit(rng);
    r.nll.push_back(nll);
    r.old_logp.push_back(-nll + (confident ? 1e-5f : 0.4f) * normal(rng));
    r.advantages.push_back(i % 11 == 5 ? 0.0f : normal(rng));
    r.ref_logp.push_back(-nll + (confident ? 1e-6f : 0.2f) * normal(rng));
    r.weights.push_back(unit(rng) < 0.2f ? 0.0f : 0.01f * (1.0f + unit(rng)));
    r.entropy.push_back(3.0f * unit(rng));
  }
  return r;
}

struct DeviceRows {
  cu::DeviceAllocator alloc;
  cu::DeviceBuffer nll, old_logp, advantages, ref_logp, weights, entropy, coef, scratch, accumulator;
  explicit DeviceRows(const Rows& r)
      : nll(to_device(alloc, r.nll)),
        old_logp(to_device(alloc, r.old_logp)),
        advantages(to_device(alloc, r.advantages)),
        ref_logp(to_device(alloc, r.ref_logp)),
        weights(to_device(alloc, r.weights)),
        entropy(to_device(alloc, r.entropy)),
        coef(alloc, r.nll.size() * sizeof(float)),
        scratch(alloc, static_cast<std::size_t>(cu::policy_coefficients_scratch()) * sizeof(double)),
        accumulator(alloc, cu::kPolicySumFields * sizeof(double)) {}
};

// Chunks over the rows (one larger than the kernel's grid of threads), accumulated then read once.
const std::vector<std::int64_t> kChunks = {0, 1, 3001, 15001, 20000};

struct Run {
  std::vector<float> coef;
  std::vector<double> accumulator;
};

Run run_gpu(DeviceRows& d, std::int64_t n, const PolicyLossParams& params, bool ref, bool entropy) {
  cu::memset_async(d.accumulator.get(), 0, cu::kPolicySumFields * sizeof(double), nullptr);
  for (std::size_t k = 0; k + 1 < kChunks.size(); ++k) {
    const std::int64_t r0 = kChunks[k], count = kChunks[k + 1] - r0;
    cu::policy_coefficients(d.nll.as<float>() + r0, d.old_logp.as<float>() + r0, d.advantages.as<float>() + r0,
                            ref ? d.ref_logp.as<float>() + r0 : nullptr, d.weights.as<float>() + r0,
                            entropy ? d.entropy.as<float>() + r0 : nullptr, count, params, d.coef.as<float>() + r0,
                            d.scratch.as<double>(), d.accumulator.as<double>(), nullptr);
  }
  return {from_device<float>(d.coef, static_cast<std::size_t>(n)),
          from_device<double>(d.accumulator, cu::kPolicySumFields)};
}

// Rows of logits of a trained head's spread (std 3) and sharper ones (std 12: entropy near 0),
// against cpu::row_entropy: within 1e-6 (1 + H).
void check_entropy(const std::vector<std::int64_t>& vocabs, std::int64_t rows) {
  std::mt19937 rng(29);
  for (const std::int64_t vocab : vocabs) {
    Bf16Data logits = random_bf16(static_cast<std::size_t>(rows * vocab), rng, 3.0f);
    for (std::int64_t j = 0; j < rows / 4 * vocab; ++j) {
      logits.f[j] *= 4.0f;  // exact: a power of two
      logits.bits[j] = odc::f32_to_bf16(logits.f[j]);
    }
    std::vector<float> want(static_cast<std::size_t>(rows));
    odc::kernels::cpu::row_entropy(logits.f.data(), rows, vocab, want.data());
    cu::DeviceAllocator alloc;
    const cu::DeviceBuffer x = to_device(alloc, logits.bits);
    cu::DeviceBuffer out(alloc, static_cast<std::size_t>(rows) * sizeof(float));
    cu::row_entropy(x.as<std::uint16_t>(), rows, vocab, out.as<float>(), nullptr);
    const std::vector<float> got = from_device<float>(out, static_cast<std::size_t>(rows));
    std::size_t bad = 0;
    double worst = 0.0;
    for (std::int64_t r = 0; r < rows; ++r) {
      const double err = std::fabs(double(got[r]) - want[r]);
      worst = std::max(worst, err / (1.0 + want[r]));
      bad += !(err <= 1e-6 * (1.0 + want[r]));
    }
    std::printf("[cuda] row_entropy vocab %lld: worst |err| / (1 + H) %.3e (H from %.3f to %.3f)\n",
                static_cast<long long>(vocab), worst, *std::min_element(want.begin(), want.end()),
                *std::max_element(want.begin(), want.end()));
    INFO("vocab " << vocab);
    CHECK(bad == 0);
  }
}

}  // namespace

// memcheck / racecheck / synccheck run in the GPU check (scripts/gpu-check.sh, tag [sanitize]).
TEST_CASE("CUDA policy coefficients and sums agree with the CPU kernel and repeat bit for bit",
          "[cuda][policy_loss][sanitize]") {
  const std::int64_t n = kChunks.back();
  const Rows rows = random_rows(n, 23);
  DeviceRows d(rows);
  PolicyLossParams kl_weighted;
  kl_weighted.kl_beta = 0.04;
  kl_weighted.clip_high = 0.28;
  PolicyLossParams kl_plain = kl_weighted;
  kl_plain.kl_ratio_weighted = false;
  kl_plain.temperature = 0.7;
  PolicyLossParams hot;
  hot.temperature = 1.3;
  struct Case {
    const char* name;
    PolicyLossParams params;
    bool ref, entropy;
  };
  const std::vector<Case> cases = {{"kl, ratio-weighted", kl_weighted, true, true},
                                   {"kl plain, T 0.7", kl_plain, true, false},
                                   {"no reference, T 1.3", hot, false, true}};
  for (const Case& c : cases) {
    INFO(c.name);
    const Run gpu = run_gpu(d, n, c.params, c.ref, c.entropy);
    const Run again = run_gpu(d, n, c.params, c.ref, c.entropy);
    CHECK(std::memcmp(gpu.coef.data(), again.coef.data(), gpu.coef.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(gpu.accumulator.data(), again.accumulator.data(), gpu.accumulator.size() * sizeof(double)) == 0);

    std::vector<float> coef(static_cast<std::size_t>(n));
    PolicyLossSums cpu;
    for (std::size_t k = 0; k + 1 < kChunks.size(); ++k) {
      const std::int64_t r0 = kChunks[k], count = kChunks[k + 1] - r0;
      odc::kernels::cpu::policy_coefficients(rows.nll.data() + r0, rows.old_logp.data() + r0,
                                             rows.advantages.data() + r0, c.ref ? rows.ref_logp.data() + r0 : nullptr,
                                             rows.weights.data() + r0, c.entropy ? rows.entropy.data() + r0 : nullptr,
                                             count, c.params, coef.data() + r0, cpu);
    }
    // Per row: the coefficient's bound, and the sums' term scales (see the header).
    const double u = std::ldexp(1.0, -53);
    std::size_t differ = 0, bad = 0;
    double worst = 0.0;
    PolicyLossSums scale;
    for (std::int64_t i = 0; i < n; ++i) {
      const double w = rows.weights[i];
      if (w == 0.0) {
        bad += gpu.coef[i] != 0.0f;
        continue;
      }
      const double logp = -static_cast<double>(rows.nll[i]);
      const double a = rows.advantages[i];
      const double r = std::exp(logp - rows.old_logp[i]);
      const double d_ = c.ref ? rows.ref_logp[i] - logp : 0.0;
      const double kl_scale = c.ref ? std::max(r, 1.0) * (std::exp(d_) + std::fabs(d_) + 1.0) : 0.0;
      const double tol = std::ldexp(1.0, -21) * std::fabs(coef[i]) +
                         std::ldexp(1.0, -48) * w * c.params.kl_beta * kl_scale / c.params.temperature;
      const double err = std::fabs(double(gpu.coef[i]) - coef[i]);
      differ += gpu.coef[i] != coef[i];
      worst = std::max(worst, tol > 0 ? err / tol : (err > 0 ? INFINITY : 0.0));
      bad += !(err <= tol);
      scale.loss += w * (2.0 * r * std::fabs(a) + 2.0 * std::fabs(a) + c.params.kl_beta * kl_scale);
      scale.kl += kl_scale;
      scale.ratio += r;
      scale.entropy += c.entropy ? rows.entropy[i] : 0.0;
      scale.nll += rows.nll[i];
    }
    PolicyLossSums sums;
    cu::add_policy_sums(gpu.accumulator.data(), sums);
    const double k = u * (2.0 * static_cast<double>(n) + 8.0);
    std::printf("[cuda] policy %-22s coefficients: %zu of %lld differ from the CPU's, worst err/bound %.3e; sums rel: "
                "loss %.2e kl %.2e ratio %.2e nll %.2e\n", c.name, differ, static_cast<long long>(n), worst,
                std::fabs(sums.loss - cpu.loss) / scale.loss,
                scale.kl > 0 ? std::fabs(sums.kl - cpu.kl) / scale.kl : 0.0,
                std::fabs(sums.ratio - cpu.ratio) / scale.ratio,
                std::fabs(sums.nll - cpu.nll) / scale.nll);
    CHECK(bad == 0);
    CHECK(sums.tokens == cpu.tokens);
    CHECK(sums.clipped_low == cpu.clipped_low);
    CHECK(sums.clipped_high == cpu.clipped_high);
    CHECK(std::fabs(sums.ratio_min - cpu.ratio_min) <= 2 * u * cpu.ratio_min);
    CHECK(std::fabs(sums.ratio_max - cpu.ratio_max) <= 2 * u * cpu.ratio_max);
    CHECK(std::fabs(sums.loss - cpu.loss) <= k * scale.loss);
    CHECK(std::fabs(sums.kl - cpu.kl) <= k * scale.kl);
    CHECK(std::fabs(sums.ratio - cpu.ratio) <= k * scale.ratio);
    CHECK(std::fabs(sums.entropy - cpu.entropy) <= k * scale.entropy);
    CHECK(std::fabs(sums.nll - cpu.nll) <= k * scale.nll);
  }
}

TEST_CASE("CUDA row entropy agrees with the CPU kernel at a real vocabulary", "[cuda][policy_loss]") {
  check_entropy({151936, 32001}, 48);  // 16-byte vector loads / scalar loads
}

// memcheck / racecheck / synccheck run in the GPU check (scripts/gpu-check.sh, tag [sanitize]).
TEST_CASE("CUDA row entropy on small rows (sanitizer case)", "[cuda][policy_loss][sanitize]") {
  check_entropy({1000, 1001}, 9);
}

TEST_CASE("CUDA policy kernels timed at a head chunk's size (equal logits give log V)", "[cuda][policy_loss]") {
  // A head chunk of the CUDA backend at Qwen's vocabulary (head_chunk_rows_of: 128 Mi logits), all
  // logits 0: every entropy is log V. Timed over 10 launches each (printed).
  const std::int64_t vocab = 151936, rows = (std::int64_t{128} << 20) / vocab;
  cu::DeviceAllocator alloc;
  cu::DeviceBuffer logits(alloc, static_cast<std::size_t>(rows * vocab) * 2), out(alloc, rows * sizeof(float));
  cu::memset_async(logits.get(), 0, static_cast<std::size_t>(rows * vocab) * 2, nullptr);
  const Rows r = random_rows(rows, 31);
  DeviceRows d(r);
  cu::memset_async(d.accumulator.get(), 0, cu::kPolicySumFields * sizeof(double), nullptr);
  const auto time_ms = [&](auto&& op) {
    op();  // warm-up
    cu::Event start(true), stop(true);
    start.record(nullptr);
    for (int i = 0; i < 10; ++i) op();
    stop.record(nullptr);
    stop.synchronize();
    return static_cast<double>(start.elapsed_ms(stop)) / 10.0;
  };
  const double entropy_ms =
      time_ms([&] { cu::row_entropy(logits.as<std::uint16_t>(), rows, vocab, out.as<float>(), nullptr); });
  const double coef_ms = time_ms([&] {
    cu::policy_coefficients(d.nll.as<float>(), d.old_logp.as<float>(), d.advantages.as<float>(), d.ref_logp.as<float>(),
                            d.weights.as<float>(), d.entropy.as<float>(), rows, PolicyLossParams{}, d.coef.as<float>(),
                            d.scratch.as<double>(), d.accumulator.as<double>(), nullptr);
  });
  const double gbps = static_cast<double>(rows * vocab) * 2.0 / (entropy_ms * 1e-3) / 1e9;
  std::printf("[cuda] policy head chunk %lld x %lld: row_entropy %.3f ms (%.0f GB/s of logits), "
              "policy_coefficients %.4f ms\n", static_cast<long long>(rows), static_cast<long long>(vocab), entropy_ms,
              gbps, coef_ms);
  const std::vector<float> h = from_device<float>(out, static_cast<std::size_t>(rows));
  const double log_v = std::log(static_cast<double>(vocab));
  CHECK(std::all_of(h.begin(), h.end(), [&](float v) { return std::fabs(v - log_v) <= 1e-6 * (1.0 + log_v); }));
  // 11 launches accumulated: 11 times the weighted rows.
  PolicyLossSums sums;
  cu::add_policy_sums(from_device<double>(d.accumulator, cu::kPolicySumFields).data(), sums);
  CHECK(sums.tokens == 11.0 * static_cast<double>(std::count_if(r.weights.begin(), r.weights.end(),
                                                                 [](float w) { return w != 0.0f; })));
}
