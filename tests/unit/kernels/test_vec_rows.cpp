// The row kernels exist as a baseline (SSE2) and an x86-64-v3 (AVX2) compilation; a run picks one
// from the CPU. Both must give bitwise the same results, so a model trains to the same numbers on
// any x86-64 CPU, and both must agree with float64 to the stated accuracy (the exp polynomial:
// about 1 ulp; sums of n terms: n ulp).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "../../../src/kernels/cpu/vec_rows.h"
#include "kernel_test_support.h"

namespace odc::kernels::cpu::rows {
namespace {

using test::random_vector;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

bool have_v3() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }

TEST_CASE("row kernels: the AVX2 variant gives the baseline's bits, and both match float64", "[kernels][vec_rows]") {
  if (!have_v3()) {
    WARN("this CPU has no AVX2+FMA: only the baseline variant runs (checked against float64)");
  }
  CHECK(active_isa() == (have_v3() ? Isa::x86_64_v3 : Isa::baseline));
  const std::vector<Isa> variants = have_v3() ? std::vector<Isa>{Isa::baseline, Isa::x86_64_v3} : std::vector<Isa>{Isa::baseline};
  // Lengths around the 8 lanes and a long row; values span exp's range down to the flush to 0.
  for (const std::int64_t n : {1, 7, 8, 9, 31, 1000}) {
    const auto x = random_vector<float>(n, 100 + std::uint32_t(n), -90, 80);
    const auto p = random_vector<float>(n, 200 + std::uint32_t(n), 0, 1);
    const auto u = random_vector<float>(n, 300 + std::uint32_t(n), -3, 3);
    std::vector<std::vector<float>> results;
    for (const Isa isa : variants) {
      std::vector<float> out;
      out.push_back(max_of(x.data(), n, isa));
      std::vector<float> e = x;
      out.push_back(exp_shifted_sum(e.data(), n, 3.0f, isa));
      out.insert(out.end(), e.begin(), e.end());
      std::vector<float> e2 = x;
      exp_shifted(e2.data(), n, 3.0f, isa);
      CHECK(same_bits(e, e2));  // the sum's exp and the plain exp are the same function
      std::vector<float> ds = u;
      softmax_grad(p.data(), ds.data(), n, 0.25f, isa);
      out.insert(out.end(), ds.begin(), ds.end());
      std::vector<float> h(n), dg(n), du(n);
      const auto g = random_vector<float>(n, 400 + std::uint32_t(n), -20, 20);
      swiglu_forward(g.data(), u.data(), h.data(), n, isa);
      swiglu_backward(p.data(), g.data(), u.data(), dg.data(), du.data(), n, isa);
      for (const auto* part : {&h, &dg, &du}) out.insert(out.end(), part->begin(), part->end());
      results.push_back(out);

      // Against float64.
      double ref_max = x[0], ref_sum = 0, worst_exp = 0, worst_silu = 0;
      for (std::int64_t i = 0; i < n; ++i) ref_max = std::max(ref_max, double(x[i]));
      CHECK(out[0] == float(ref_max));
      for (std::int64_t i = 0; i < n; ++i) {
        // The kernel's argument is the float x - shift; exp itself is the part under test.
        const double ref = std::exp(double(x[i] - 3.0f));
        ref_sum += ref;
        // Below ln(FLT_MIN) the kernel flushes to 0 (documented in vec_math.h).
        if (double(x[i]) - 3.0 > -87.0) worst_exp = std::max(worst_exp, std::fabs(e[i] - ref) / ref);
        const double gd = g[i], s = 1.0 / (1.0 + std::exp(-gd));
        const double ref_h = gd * s * u[i];
        worst_silu = std::max(worst_silu, std::fabs(h[i] - ref_h) / std::max(1e-30, std::fabs(ref_h)));
      }
      CHECK(worst_exp < 4e-7);
      CHECK(worst_silu < 2e-6);
      CHECK(std::fabs(out[1] - ref_sum) <= 1e-6 * double(n) * ref_sum);
    }
    if (results.size() == 2) CHECK(same_bits(results[0], results[1]));
  }
}

}  // namespace
}  // namespace odc::kernels::cpu::rows
