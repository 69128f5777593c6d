// Rotary embedding: inverse frequencies against the Hugging Face formulas (default and llama3
// rope_scaling), tables and rotation against naive double loops, backward against central
// finite differences in double.
#include <catch2/catch.hpp>

#include <cmath>
#include <numbers>
#include <vector>

#include "odc/core/error.h"
#include "odc/kernels/rope.h"
#include "unit/kernels/kernel_test_support.h"

namespace {

using namespace odc::kernels;
using namespace odc::kernels::cpu;
using namespace odc::kernels::test;

// Hugging Face `_compute_llama3_parameters`, written out per frequency.
std::vector<double> hf_llama3_inv_freq(int head_dim, double theta, double factor, double low,
                                       double high, double original) {
  std::vector<double> out;
  for (int i = 0; i < head_dim / 2; ++i) {
    const double f = 1.0 / std::pow(theta, double(2 * i) / head_dim);
    const double wavelen = 2 * std::numbers::pi / f;
    if (wavelen < original / high) {
      out.push_back(f);
    } else if (wavelen > original / low) {
      out.push_back(f / factor);
    } else {
      const double smooth = (original / wavelen - low) / (high - low);
      out.push_back((1 - smooth) * f / factor + smooth * f);
    }
  }
  return out;
}

// Reference rotation of x[tokens, heads*head_dim] at the given positions (rotate-half layout).
std::vector<double> reference_rope(const std::vector<double>& x,
                                   const std::vector<std::int32_t>& pos,
                                   const std::vector<double>& inv_freq, int heads, int head_dim) {
  std::vector<double> y(x.size());
  const int half = head_dim / 2;
  for (std::size_t t = 0; t < pos.size(); ++t) {
    for (int h = 0; h < heads; ++h) {
      const std::size_t base = (t * heads + h) * head_dim;
      for (int i = 0; i < half; ++i) {
        const double angle = pos[t] * inv_freq[i];
        y[base + i] = x[base + i] * std::cos(angle) - x[base + i + half] * std::sin(angle);
        y[base + i + half] = x[base + i + half] * std::cos(angle) + x[base + i] * std::sin(angle);
      }
    }
  }
  return y;
}

}  // namespace

TEST_CASE("rope_inv_freq without scaling is theta^(-2i/D)", "[kernels][rope]") {
  const auto f = rope_inv_freq(64, 10000.0, RopeScaling{});
  REQUIRE(f.size() == 32);
  for (int i = 0; i < 32; ++i)
    CHECK(f[i] == Approx(std::pow(10000.0, -2.0 * i / 64)).epsilon(1e-15));
  CHECK(f[0] == 1.0);
}

TEST_CASE("rope_inv_freq with llama3 rope_scaling matches the Hugging Face formula",
          "[kernels][rope]") {
  // Llama 3.1 8B: head_dim 128, theta 500000, factor 8, low 1, high 4, original 8192.
  RopeScaling scaling;
  scaling.type = "llama3";
  scaling.factor = 8.0;
  scaling.low_freq_factor = 1.0;
  scaling.high_freq_factor = 4.0;
  scaling.original_max_position_embeddings = 8192.0;
  const auto got = rope_inv_freq(128, 500000.0, scaling);
  const auto want = hf_llama3_inv_freq(128, 500000.0, 8.0, 1.0, 4.0, 8192.0);
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(1e-14));

  // All three bands occur for these parameters: kept, divided by factor, and interpolated.
  const auto plain = rope_inv_freq(128, 500000.0, RopeScaling{});
  int kept = 0, divided = 0, smoothed = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] == plain[i]) {
      ++kept;
    } else if (std::fabs(got[i] - plain[i] / 8.0) < 1e-15 * plain[i]) {
      ++divided;
    } else {
      ++smoothed;
      CHECK(got[i] < plain[i]);
      CHECK(got[i] > plain[i] / 8.0);
    }
  }
  CHECK(kept > 0);
  CHECK(divided > 0);
  CHECK(smoothed > 0);
}

TEST_CASE("rope_inv_freq rejects odd head_dim and unknown scaling types", "[kernels][rope]") {
  CHECK_THROWS_AS(rope_inv_freq(7, 10000.0, RopeScaling{}), odc::Error);
  RopeScaling yarn;
  yarn.type = "yarn";
  CHECK_THROWS_AS(rope_inv_freq(64, 10000.0, yarn), odc::Error);
  RopeScaling linear;
  linear.type = "linear";
  linear.factor = 4.0;
  const auto f = rope_inv_freq(8, 10000.0, linear);
  CHECK(f[1] == Approx(std::pow(10000.0, -0.25) / 4.0).epsilon(1e-15));
}

TEST_CASE("rope forward matches the rotate-half definition with per-sequence positions",
          "[kernels][rope]") {
  const int heads = 3, head_dim = 16, half = 8;
  // Two packed sequences: positions restart at 0; one large position tests angle accuracy.
  const std::vector<std::int32_t> pos = {0, 1, 2, 3, 0, 1, 4095};
  const int tokens = int(pos.size());
  const auto inv_freq = rope_inv_freq(head_dim, 10000.0, RopeScaling{});
  const auto x = random_vector(tokens * heads * head_dim, 1);
  const auto ref = reference_rope(x, pos, inv_freq, heads, head_dim);

  std::vector<float> cosf(tokens * half), sinf(tokens * half);
  rope_tables<float>(pos.data(), tokens, inv_freq, cosf.data(), sinf.data());
  for (int t = 0; t < tokens; ++t) {
    for (int i = 0; i < half; ++i) {
      // Tables are computed in double and rounded once: within one float ulp.
      CHECK(cosf[t * half + i] == Approx(std::cos(pos[t] * inv_freq[i])).margin(6e-8));
      CHECK(sinf[t * half + i] == Approx(std::sin(pos[t] * inv_freq[i])).margin(6e-8));
    }
  }
  auto xf = convert<float>(x);
  rope_forward<float>(xf.data(), cosf.data(), sinf.data(), tokens, heads, head_dim);
  // Two products and a sum of float-rounded values: a few ulp of |x| <= 1.
  CHECK(max_abs_diff(xf, ref) < 5e-7);
  // Position 0 is the identity.
  for (int c = 0; c < heads * head_dim; ++c) CHECK(xf[c] == float(x[c]));

  std::vector<double> cosd(tokens * half), sind(tokens * half);
  rope_tables<double>(pos.data(), tokens, inv_freq, cosd.data(), sind.data());
  auto xd = x;
  rope_forward<double>(xd.data(), cosd.data(), sind.data(), tokens, heads, head_dim);
  CHECK(max_abs_diff(xd, ref) < 1e-15);

  SECTION("backward undoes forward (rotations are orthogonal)") {
    rope_backward<double>(xd.data(), cosd.data(), sind.data(), tokens, heads, head_dim);
    CHECK(max_abs_diff(xd, x) < 1e-15);
  }
}

TEST_CASE("rope backward matches central finite differences in double", "[kernels][rope]") {
  const int heads = 2, head_dim = 8, half = 4;
  const std::vector<std::int32_t> pos = {0, 1, 2, 0, 5};
  const int tokens = int(pos.size());
  RopeScaling scaling;
  scaling.type = "llama3";
  scaling.factor = 8.0;
  scaling.original_max_position_embeddings = 64.0;
  const auto inv_freq = rope_inv_freq(head_dim, 10000.0, scaling);
  std::vector<double> cosd(tokens * half), sind(tokens * half);
  rope_tables<double>(pos.data(), tokens, inv_freq, cosd.data(), sind.data());
  auto x = random_vector(tokens * heads * head_dim, 2);
  const auto dy = random_vector(x.size(), 3);  // loss = sum(rope(x) * dy)
  auto loss = [&] {
    auto y = x;
    rope_forward<double>(y.data(), cosd.data(), sind.data(), tokens, heads, head_dim);
    return dot(y, dy);
  };
  auto dx = dy;
  rope_backward<double>(dx.data(), cosd.data(), sind.data(), tokens, heads, head_dim);
  CHECK(gradient_error(dx, x, loss) < 1e-6);
}
