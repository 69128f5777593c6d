// policy_loss.cu executed by the emulator against the CPU kernels (kernels/policy_loss.h): the
// policy coefficients and their sums over several chunks accumulated on the device then read
// once, and the row entropies of bf16 logits.
//
// Bounds:
//  - coefficients: bitwise. The kernel does the CPU kernel's double operations in its order (no
//    fused multiply-adds) and rounds alike; here exp is the host's on both sides. (On a GPU the
//    device's exp may differ by 1 ulp: tests/cuda/test_cuda_policy_loss.cpp.)
//  - tokens, clipped counts, ratio min and max: exact (integers; min/max need no order). The other
//    sums add the same double terms in another order: each order is within (n - 1) 2^-53 sum|term|
//    of the exact sum, so the two within 2 n 2^-53 sum|term| (n the rows).
//  - entropy: the kernel's exponentials are fp32 (expf: within 2 ulp on a GPU, 1 here), relative
//    delta <= 2.4e-7 per term; its sums are double and its terms share a sign, so the sums s and
//    t keep that relative error, and H = log s - t / s (log s >= 0, |t / s| <= H) moves by at most
//    delta (1 + 2H) plus the fp32 rounding of H: within 1e-6 (1 + H).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "emu_test_support.h"
#include "odc/kernels/cuda_policy_loss.h"
#include "odc/kernels/policy_loss.h"

namespace kc = odc::kernels::cuda;
using odc::kernels::PolicyLossParams;
using odc::kernels::PolicyLossSums;
using odc_emu_test::random_bf16;

namespace {

// A head's rows: nll, and sampling log-probabilities spread so that the ratio falls inside and
// outside the clip range on both sides; advantages of both signs and some 0; about a fifth of the
// weights 0; reference log-probabilities near the current ones; entropies.
struct Rows {
  std::vector<float> nll, old_logp, advantages, ref_logp, weights, entropy;
};

Rows random_rows(std::int64_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Rows r;
  for (std::int64_t i = 0; i < n; ++i) {
    const float nll = 8.0f * unit(rng) * unit(rng);
    r.nll.push_back(nll);
    r.old_logp.push_back(-nll + 0.4f * normal(rng));  // ratio exp(logp - old) = exp(0.4 N(0, 1))
    r.advantages.push_back(i % 11 == 5 ? 0.0f : normal(rng));
    r.ref_logp.push_back(-nll + 0.2f * normal(rng));
    r.weights.push_back(unit(rng) < 0.2f ? 0.0f : 0.01f * (1.0f + unit(rng)));
    r.entropy.push_back(3.0f * unit(rng));
  }
  return r;
}

struct Case {
  const char* name;
  PolicyLossParams params;
  bool ref;
  bool entropy;
};

// Chunk boundaries over the head: an all-weight-0 chunk first (the accumulator stays empty), one
// row, one chunk larger than the kernel's grid of threads, and an odd one.
const std::vector<std::int64_t> kChunks = {0, 40, 41, 10041, 12352};

// Row i's sums alone, by the CPU kernel (for the sums' bound: sum |term|).
PolicyLossSums row_sums(const Rows& r, std::int64_t i, const Case& c) {
  PolicyLossSums s;
  float coef = 0.0f;
  odc::kernels::cpu::policy_coefficients(&r.nll[i], &r.old_logp[i], &r.advantages[i], c.ref ? &r.ref_logp[i] : nullptr,
                                         &r.weights[i], c.entropy ? &r.entropy[i] : nullptr, 1, c.params, &coef, s);
  return s;
}

}  // namespace

TEST_CASE("emu policy coefficients: bitwise the CPU kernel's over chunks, sums accumulated on the device",
          "[emu][policy_loss]") {
  PolicyLossParams kl_weighted;
  kl_weighted.kl_beta = 0.04;
  kl_weighted.clip_high = 0.28;
  PolicyLossParams kl_plain = kl_weighted;
  kl_plain.kl_ratio_weighted = false;
  kl_plain.temperature = 0.7;
  PolicyLossParams hot;
  hot.temperature = 1.3;
  const std::vector<Case> cases = {{"kl, ratio-weighted", kl_weighted, true, true},
                                   {"kl plain, T 0.7", kl_plain, true, false},
                                   {"no reference, T 1.3", hot, false, true},
                                   {"reference measured, no penalty", PolicyLossParams{}, true, false}};
  const std::int64_t n = kChunks.back();
  Rows rows = random_rows(n, 17);
  for (std::int64_t i = kChunks[0]; i < kChunks[1]; ++i) rows.weights[i] = 0.0f;
  for (const Case& c : cases) {
    INFO(c.name);
    std::vector<float> cpu_coef(n, NAN), gpu_coef(n, NAN);
    std::vector<double> scratch(kc::policy_coefficients_scratch(), NAN);
    std::vector<double> accumulator(kc::kPolicySumFields, 0.0);
    PolicyLossSums cpu;
    for (std::size_t k = 0; k + 1 < kChunks.size(); ++k) {
      const std::int64_t r0 = kChunks[k], count = kChunks[k + 1] - r0;
      const float* ref = c.ref ? rows.ref_logp.data() + r0 : nullptr;
      const float* entropy = c.entropy ? rows.entropy.data() + r0 : nullptr;
      odc::kernels::cpu::policy_coefficients(rows.nll.data() + r0, rows.old_logp.data() + r0,
                                             rows.advantages.data() + r0, ref, rows.weights.data() + r0, entropy,
                                             count, c.params, cpu_coef.data() + r0, cpu);
      kc::policy_coefficients(rows.nll.data() + r0, rows.old_logp.data() + r0, rows.advantages.data() + r0, ref,
                              rows.weights.data() + r0, entropy, count, c.params, gpu_coef.data() + r0,
                              scratch.data(), accumulator.data(), nullptr);
      if (k == 0) CHECK(accumulator[kc::kPolicyTokens] == 0.0);  // nothing weighted yet
    }
    CHECK(std::memcmp(gpu_coef.data(), cpu_coef.data(), cpu_coef.size() * sizeof(float)) == 0);
    PolicyLossSums gpu;
    kc::add_policy_sums(accumulator.data(), gpu);

    PolicyLossSums abs;  // sum |term| per field
    int clipped_low = 0, clipped_high = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const PolicyLossSums s = row_sums(rows, i, c);
      abs.loss += std::fabs(s.loss);
      abs.kl += std::fabs(s.kl);
      abs.ratio += s.ratio;
      abs.entropy += s.entropy;
      abs.nll += s.nll;
      clipped_low += s.clipped_low > 0;
      clipped_high += s.clipped_high > 0;
    }
    // The cases must reach both sides of the clip range and the penalty, or the test shows little.
    CHECK(clipped_low > 100);
    CHECK(clipped_high > 100);
    CHECK((!c.ref || abs.kl > 0));
    const double bound = 2.0 * static_cast<double>(n) * std::ldexp(1.0, -53);
    CHECK(gpu.tokens == cpu.tokens);
    CHECK(gpu.clipped_low == cpu.clipped_low);
    CHECK(gpu.clipped_high == cpu.clipped_high);
    CHECK(gpu.ratio_min == cpu.ratio_min);
    CHECK(gpu.ratio_max == cpu.ratio_max);
    CHECK(std::fabs(gpu.loss - cpu.loss) <= bound * abs.loss);
    CHECK(std::fabs(gpu.kl - cpu.kl) <= bound * abs.kl);
    CHECK(std::fabs(gpu.ratio - cpu.ratio) <= bound * abs.ratio);
    CHECK(std::fabs(gpu.entropy - cpu.entropy) <= bound * abs.entropy);
    CHECK(std::fabs(gpu.nll - cpu.nll) <= bound * abs.nll);
    CHECK((c.entropy ? gpu.entropy > 0 : gpu.entropy == 0));
    std::printf("[emu-policy] %-32s tokens %.0f clipped %.0f/%.0f loss rel %.2e kl rel %.2e nll rel %.2e\n", c.name,
                gpu.tokens, gpu.clipped_low, gpu.clipped_high, std::fabs(gpu.loss - cpu.loss) / abs.loss,
                abs.kl > 0 ? std::fabs(gpu.kl - cpu.kl) / abs.kl : 0.0, std::fabs(gpu.nll - cpu.nll) / abs.nll);
  }
}

TEST_CASE("emu policy coefficients: a read accumulator zeroed is empty again", "[emu][policy_loss]") {
  // resolve_policy's reset: the next head's sums are its own (min and max included).
  const Rows rows = random_rows(300, 5);
  std::vector<float> coef(300);
  std::vector<double> scratch(kc::policy_coefficients_scratch());
  std::vector<double> accumulator(kc::kPolicySumFields, 0.0);
  const PolicyLossParams params;
  kc::policy_coefficients(rows.nll.data(), rows.old_logp.data(), rows.advantages.data(), nullptr, rows.weights.data(),
                          nullptr, 200, params, coef.data(), scratch.data(), accumulator.data(), nullptr);
  std::fill(accumulator.begin(), accumulator.end(), 0.0);
  kc::policy_coefficients(rows.nll.data() + 200, rows.old_logp.data() + 200, rows.advantages.data() + 200, nullptr,
                          rows.weights.data() + 200, nullptr, 100, params, coef.data(), scratch.data(),
                          accumulator.data(), nullptr);
  PolicyLossSums gpu, cpu;
  kc::add_policy_sums(accumulator.data(), gpu);
  std::vector<float> cpu_coef(100);
  odc::kernels::cpu::policy_coefficients(rows.nll.data() + 200, rows.old_logp.data() + 200,
                                         rows.advantages.data() + 200, nullptr, rows.weights.data() + 200, nullptr, 100,
                                         params, cpu_coef.data(), cpu);
  CHECK(gpu.tokens == cpu.tokens);
  CHECK(gpu.ratio_min == cpu.ratio_min);
  CHECK(gpu.ratio_max == cpu.ratio_max);
  CHECK(std::fabs(gpu.ratio - cpu.ratio) <= 200 * std::ldexp(1.0, -53) * cpu.ratio);
}

TEST_CASE("emu row entropy: bf16 rows against cpu::row_entropy, both load paths", "[emu][policy_loss]") {
  for (const std::int64_t vocab : {1000, 1001}) {  // 16-byte vector loads / scalar loads
    // Uniform logits in [-scale, scale): a flat row (0.01: H near log V) and wider ones; a
    // peaked row (one logit 30 above the rest: H near 0); one of equal values (H = log V
    // exactly); one rising along the row (a new maximum at each of a thread's elements).
    const std::int64_t rows = 8;
    std::vector<std::uint16_t> bits;
    const std::vector<float> scales = {0.01f, 1.0f, 4.0f, 12.0f, 40.0f, 1.0f};
    for (std::size_t k = 0; k < scales.size(); ++k) {
      const auto row = random_bf16(static_cast<std::size_t>(vocab), scales[k], static_cast<std::uint32_t>(vocab + k));
      bits.insert(bits.end(), row.bits.begin(), row.bits.end());
    }
    bits[5 * vocab + 123] = odc_emu_test::to_bf16(31.0f);
    for (std::int64_t j = 0; j < vocab; ++j) bits.push_back(odc_emu_test::to_bf16(1.5f));
    for (std::int64_t j = 0; j < vocab; ++j) bits.push_back(odc_emu_test::to_bf16(0.01f * static_cast<float>(j)));
    std::vector<float> values(bits.size());
    for (std::size_t i = 0; i < bits.size(); ++i) values[i] = odc_emu_test::from_bf16(bits[i]);
    std::vector<float> want(rows), got(rows, NAN);
    odc::kernels::cpu::row_entropy(values.data(), rows, vocab, want.data());
    kc::row_entropy(bits.data(), rows, vocab, got.data(), nullptr);
    INFO("vocab " << vocab);
    double worst = 0.0;
    for (std::int64_t r = 0; r < rows; ++r) {
      INFO("row " << r << ": " << got[r] << " want " << want[r]);
      const double err = std::fabs(double(got[r]) - want[r]);
      worst = std::max(worst, err / (1.0 + want[r]));
      CHECK(err <= 1e-6 * (1.0 + want[r]));
    }
    std::printf("[emu-policy] row_entropy vocab %lld: worst |err| / (1 + H) %.3e\n", static_cast<long long>(vocab),
                worst);
    CHECK(want[5] < 0.1);                                                         // peaked
    CHECK(std::fabs(want[6] - std::log(static_cast<double>(vocab))) < 1e-5);       // equal values
    CHECK(std::fabs(want[0] - std::log(static_cast<double>(vocab))) < 1e-3);       // flat
  }
}
