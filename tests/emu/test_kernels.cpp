// The element-wise and row kernels of src/kernels/cuda (cast, swiglu, rope, adamw, rmsnorm,
// embedding) executed by the emulator through their public entry points (cuda_ops.h,
// cuda_cast.h), against float64 references. The tests check results, not how the kernels reach
// them (grid shapes, atomics or fixed-order reductions), so a kernel rewritten for determinism
// keeps them.
//
// Tolerances: an output rounded to bf16 is within half a bf16 ulp (2^-9 relative) of its fp32
// value, which is within a few fp32 ulps of the float64 reference: bound 2^-8 |ref| + 1e-6
// (twice the rounding, plus slack for values near zero). fp32 outputs (casts, AdamW, rstd,
// weight and table gradients): fp32 arithmetic over at most a few hundred terms: 1e-5 relative.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "emu_test_support.h"
#include "odc/kernels/cuda_cast.h"
#include "odc/kernels/cuda_ops.h"

namespace kc = odc::kernels::cuda;
using odc_emu_test::Bf16Data;
using odc_emu_test::from_bf16;
using odc_emu_test::random_bf16;
using odc_emu_test::to_bf16;

namespace {

bool near_bf16(std::uint16_t got, double want) {
  return std::fabs(from_bf16(got) - want) <= 0x1p-8 * std::fabs(want) + 1e-6;
}
bool near_f32(double got, double want) {
  return std::fabs(got - want) <= 1e-5 * std::fabs(want) + 1e-7;
}

// Counts the elements outside the bound (and reports the first).
template <typename G, typename Near>
int mismatches(const std::vector<G>& got, const std::vector<double>& want, Near near) {
  int bad = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (!near(got[i], want[i])) {
      if (bad == 0) UNSCOPED_INFO("first mismatch at " << i << ": got " << double(got[i]) << ", want " << want[i]);
      ++bad;
    }
  }
  return bad;
}

double silu(double g) { return g / (1.0 + std::exp(-g)); }

}  // namespace

TEST_CASE("emu kernels: casts and fill over a grid-strided range", "[emu][kernels]") {
  // 70001 elements: 274 blocks of 256, the last one partial.
  const std::int64_t n = 70001;
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 10.0f);
  std::vector<float> in(n);
  for (float& x : in) x = dist(rng);
  std::vector<std::uint16_t> bf(n);
  kc::cast_f32_to_bf16(in.data(), bf.data(), n, nullptr);
  std::vector<float> back(n), filled(n, 0.0f);
  kc::cast_bf16_to_f32(bf.data(), back.data(), n, nullptr);
  kc::fill_f32(filled.data(), 2.5f, n, nullptr);
  int bad = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    bad += bf[i] != to_bf16(in[i]);  // exact: round to nearest even
    bad += back[i] != from_bf16(bf[i]);
    bad += filled[i] != 2.5f;
  }
  CHECK(bad == 0);
}

TEST_CASE("emu kernels: swiglu forward and backward", "[emu][kernels]") {
  const std::int64_t n = 5000;
  const Bf16Data gate = random_bf16(n, 6.0f, 1), up = random_bf16(n, 2.0f, 2), dh = random_bf16(n, 1.0f, 3);
  std::vector<std::uint16_t> h(n), dgate(n), dup(n);
  kc::swiglu_forward(gate.bits.data(), up.bits.data(), n, h.data(), 1, n, nullptr);
  kc::swiglu_backward(dh.bits.data(), gate.bits.data(), up.bits.data(), n, dgate.data(), dup.data(), 1, n, nullptr);
  std::vector<double> h_ref(n), dgate_ref(n), dup_ref(n);
  for (std::int64_t i = 0; i < n; ++i) {
    const double g = gate.values[i], u = up.values[i], d = dh.values[i];
    const double s = 1.0 / (1.0 + std::exp(-g));
    h_ref[i] = silu(g) * u;
    dup_ref[i] = d * silu(g);
    dgate_ref[i] = d * u * s * (1.0 + g * (1.0 - s));
  }
  CHECK(mismatches(h, h_ref, near_bf16) == 0);
  CHECK(mismatches(dgate, dgate_ref, near_bf16) == 0);
  CHECK(mismatches(dup, dup_ref, near_bf16) == 0);
}

TEST_CASE("emu kernels: 16-byte vector steps and element steps give the same bits (casts, add, fused swiglu)",
          "[emu][kernels]") {
  // 8 * 625 + 5 elements: vector steps and a tail. The element path is taken when a pointer is not
  // 16-byte aligned: the same data one element into 16-byte aligned buffers (a 2- or 4-byte offset).
  const std::int64_t n = 5005;
  const Bf16Data gate = random_bf16(n, 6.0f, 11), up = random_bf16(n, 2.0f, 12), dh = random_bf16(n, 1.0f, 13);
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> f(n), g(n);
  for (auto& x : f) x = dist(rng);
  for (auto& x : g) x = dist(rng);
  // Copies at offset 1 of a 16-byte aligned vector.
  const auto shifted16 = [&](const std::vector<std::uint16_t>& v) {
    std::vector<std::uint16_t> out(v.size() + 8);
    std::copy(v.begin(), v.end(), out.begin() + 1);
    return out;
  };
  const auto shifted32 = [&](const std::vector<float>& v) {
    std::vector<float> out(v.size() + 4);
    std::copy(v.begin(), v.end(), out.begin() + 1);
    return out;
  };
  REQUIRE(reinterpret_cast<std::uintptr_t>(f.data()) % 16 == 0);
  REQUIRE(reinterpret_cast<std::uintptr_t>(gate.bits.data()) % 16 == 0);

  std::vector<std::uint16_t> cast_vec(n), cast_el(n + 8);
  std::vector<float> f_el = shifted32(f);
  kc::cast_f32_to_bf16(f.data(), cast_vec.data(), n, nullptr);
  kc::cast_f32_to_bf16(f_el.data() + 1, cast_el.data() + 1, n, nullptr);
  CHECK(std::equal(cast_vec.begin(), cast_vec.end(), cast_el.begin() + 1));

  std::vector<float> wide_vec(n), wide_el(n + 4);
  std::vector<std::uint16_t> bits_el = shifted16(cast_vec);
  kc::cast_bf16_to_f32(cast_vec.data(), wide_vec.data(), n, nullptr);
  kc::cast_bf16_to_f32(bits_el.data() + 1, wide_el.data() + 1, n, nullptr);
  CHECK(std::equal(wide_vec.begin(), wide_vec.end(), wide_el.begin() + 1));

  std::vector<float> acc_vec = f, acc_el = shifted32(f), g_el = shifted32(g);
  kc::add_f32(acc_vec.data(), g.data(), n, nullptr);
  kc::add_f32(acc_el.data() + 1, g_el.data() + 1, n, nullptr);
  CHECK(std::equal(acc_vec.begin(), acc_vec.end(), acc_el.begin() + 1));
  for (std::int64_t i = 0; i < n; ++i) REQUIRE(acc_vec[i] == f[i] + g[i]);

  // SwiGLU over the fused layout [rows, 2 * width] (gate then up per row), 16-byte steps (width
  // a multiple of 8) against element steps (the same data one element into aligned buffers),
  // and against the flat one-row call per row.
  const std::int64_t rows = 5, width = 1000;
  REQUIRE(rows * width <= n);
  std::vector<std::uint16_t> gu(static_cast<std::size_t>(2 * rows * width));
  for (std::int64_t r = 0; r < rows; ++r) {
    std::copy_n(gate.bits.begin() + r * width, width, gu.begin() + 2 * r * width);
    std::copy_n(up.bits.begin() + r * width, width, gu.begin() + 2 * r * width + width);
  }
  const auto gu_el = shifted16(gu);
  std::vector<std::uint16_t> h_vec(rows * width), h_el(rows * width + 8), h_flat(rows * width);
  kc::swiglu_forward(gu.data(), gu.data() + width, 2 * width, h_vec.data(), rows, width, nullptr);
  kc::swiglu_forward(gu_el.data() + 1, gu_el.data() + 1 + width, 2 * width, h_el.data() + 1, rows, width, nullptr);
  CHECK(std::equal(h_vec.begin(), h_vec.end(), h_el.begin() + 1));
  kc::swiglu_forward(gate.bits.data(), up.bits.data(), rows * width, h_flat.data(), 1, rows * width, nullptr);
  CHECK(h_vec == h_flat);

  std::vector<std::uint16_t> dgu_vec(gu.size()), dgu_el(gu.size() + 8), dg_flat(rows * width), du_flat(rows * width);
  const auto dh_el = shifted16(dh.bits);
  kc::swiglu_backward(dh.bits.data(), gu.data(), gu.data() + width, 2 * width, dgu_vec.data(), dgu_vec.data() + width,
                      rows, width, nullptr);
  kc::swiglu_backward(dh_el.data() + 1, gu_el.data() + 1, gu_el.data() + 1 + width, 2 * width, dgu_el.data() + 1,
                      dgu_el.data() + 1 + width, rows, width, nullptr);
  CHECK(std::equal(dgu_vec.begin(), dgu_vec.end(), dgu_el.begin() + 1));
  kc::swiglu_backward(dh.bits.data(), gate.bits.data(), up.bits.data(), rows * width, dg_flat.data(), du_flat.data(),
                      1, rows * width, nullptr);
  for (std::int64_t r = 0; r < rows; ++r) {
    CHECK(std::equal(dg_flat.begin() + r * width, dg_flat.begin() + (r + 1) * width, dgu_vec.begin() + 2 * r * width));
    CHECK(std::equal(du_flat.begin() + r * width, du_flat.begin() + (r + 1) * width,
                     dgu_vec.begin() + 2 * r * width + width));
  }
}

TEST_CASE("emu kernels: rope forward rotates and backward rotates back", "[emu][kernels]") {
  const int tokens = 37, heads = 3, head_dim = 64, half = head_dim / 2;
  const Bf16Data x = random_bf16(static_cast<std::size_t>(tokens) * heads * head_dim, 1.0f, 5);
  std::vector<float> cos_t(tokens * half), sin_t(tokens * half);
  for (int t = 0; t < tokens; ++t) {
    for (int i = 0; i < half; ++i) {
      const double angle = t * std::pow(10000.0, -2.0 * i / head_dim);
      cos_t[t * half + i] = static_cast<float>(std::cos(angle));
      sin_t[t * half + i] = static_cast<float>(std::sin(angle));
    }
  }
  std::vector<std::uint16_t> y = x.bits;
  kc::rope_forward(y.data(), cos_t.data(), sin_t.data(), tokens, heads, head_dim, nullptr);
  std::vector<double> ref(x.values.size());
  for (int t = 0; t < tokens; ++t) {
    for (int h = 0; h < heads; ++h) {
      const std::size_t base = (static_cast<std::size_t>(t) * heads + h) * head_dim;
      for (int i = 0; i < half; ++i) {
        const double c = cos_t[t * half + i], s = sin_t[t * half + i];
        const double a = x.values[base + i], b = x.values[base + half + i];
        ref[base + i] = a * c - b * s;
        ref[base + half + i] = b * c + a * s;
      }
    }
  }
  CHECK(mismatches(y, ref, near_bf16) == 0);
  // Backward is the inverse rotation: applied to y it gives x back within two roundings.
  kc::rope_backward(y.data(), cos_t.data(), sin_t.data(), tokens, heads, head_dim, nullptr);
  CHECK(mismatches(y, x.values, [](std::uint16_t g, double w) {
          return std::fabs(from_bf16(g) - w) <= 0x1p-7 * std::fabs(w) + 0x1p-8;
        }) == 0);
}

TEST_CASE("emu kernels: adamw over 70 segments (two launches), with and without decay", "[emu][kernels]") {
  kc::AdamWConfig cfg;
  cfg.lr = 1e-2;
  cfg.weight_decay = 0.1;
  cfg.step = 3;
  cfg.grad_scale = 0.5;
  const int segments = 70;
  std::mt19937 rng(9);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<std::vector<float>> p(segments), g(segments), m(segments), v(segments);
  std::vector<kc::AdamWSegment> segs;
  for (int s = 0; s < segments; ++s) {
    const std::size_t n = 1 + static_cast<std::size_t>(s) * 37;
    for (auto* vec : {&p[s], &g[s], &m[s]}) {
      vec->resize(n);
      for (float& x : *vec) x = dist(rng);
    }
    v[s].resize(n);
    for (float& x : v[s]) x = std::fabs(dist(rng));
    segs.push_back({p[s].data(), g[s].data(), m[s].data(), v[s].data(), static_cast<std::int64_t>(n), s % 3 != 0});
  }
  const auto p0 = p, m0 = m, v0 = v;
  kc::adamw_step_multi(segs, cfg, nullptr);
  const double bc1 = 1.0 - std::pow(cfg.beta1, 3.0), bc2 = 1.0 - std::pow(cfg.beta2, 3.0);
  int bad = 0;
  for (int s = 0; s < segments; ++s) {
    const double decay = s % 3 != 0 ? 1.0 - cfg.lr * cfg.weight_decay : 1.0;
    for (std::size_t i = 0; i < p[s].size(); ++i) {
      const double gi = g[s][i] * cfg.grad_scale;
      const double mi = cfg.beta1 * m0[s][i] + (1 - cfg.beta1) * gi;
      const double vi = cfg.beta2 * v0[s][i] + (1 - cfg.beta2) * gi * gi;
      const double pi = p0[s][i] * decay - cfg.lr / bc1 * mi / (std::sqrt(vi / bc2) + cfg.eps);
      bad += !near_f32(m[s][i], mi) + !near_f32(v[s][i], vi) + !near_f32(p[s][i], pi);
    }
  }
  CHECK(bad == 0);
}

TEST_CASE("emu kernels: rmsnorm forward and backward (dx accumulate, dweight accumulates)", "[emu][kernels]") {
  struct Case {
    std::int64_t rows, dim;
    bool in_place;  // dx = dy, overwritten (Qwen3's q/k norm: rows of one head each, in place)
  };
  // 64 threads per row; 256 threads striding a row (both: two chunks of the weight-gradient
  // rows); per-head rows of head_dim 64 and 128 (tokens x heads rows: three chunks).
  for (const Case c : {Case{70, 40, false}, Case{70, 300, false}, Case{130, 64, true}, Case{130, 128, true}}) {
    const std::int64_t rows = c.rows, dim = c.dim;
    const double eps = 1e-5;
    const Bf16Data x = random_bf16(rows * dim, 2.0f, 11), w = random_bf16(dim, 1.0f, 12),
                   dy = random_bf16(rows * dim, 1.0f, 13), dx0 = random_bf16(rows * dim, 1.0f, 14);
    std::vector<std::uint16_t> y(rows * dim);
    std::vector<float> rstd(rows);
    kc::rmsnorm_forward(x.bits.data(), w.bits.data(), y.data(), rstd.data(), rows, dim, eps, nullptr);
    std::vector<std::uint16_t> dx = c.in_place ? dy.bits : dx0.bits;
    std::vector<float> dweight(dim, 0.25f);
    kc::DeviceAllocator allocator;  // the dweight scratch
    kc::rmsnorm_backward(c.in_place ? dx.data() : dy.bits.data(), x.bits.data(), w.bits.data(), rstd.data(),
                         dx.data(), dweight.data(), rows, dim, !c.in_place, allocator, nullptr);
    std::vector<double> y_ref(rows * dim), rstd_ref(rows), dx_ref(rows * dim), dw_ref(dim, 0.25);
    for (std::int64_t r = 0; r < rows; ++r) {
      double ss = 0.0, dot = 0.0;
      for (std::int64_t i = 0; i < dim; ++i) ss += x.values[r * dim + i] * x.values[r * dim + i];
      const double inv = 1.0 / std::sqrt(ss / dim + eps);
      rstd_ref[r] = inv;
      for (std::int64_t i = 0; i < dim; ++i) {
        const double xi = x.values[r * dim + i], gi = dy.values[r * dim + i];
        y_ref[r * dim + i] = xi * inv * w.values[i];
        dot += gi * w.values[i] * xi;
        dw_ref[i] += gi * xi * inv;
      }
      for (std::int64_t i = 0; i < dim; ++i) {
        const double xi = x.values[r * dim + i], gi = dy.values[r * dim + i];
        dx_ref[r * dim + i] = inv * w.values[i] * gi - inv * inv * inv * dot / dim * xi +
                              (c.in_place ? 0.0 : dx0.values[r * dim + i]);
      }
    }
    INFO("rows " << rows << " dim " << dim << " in place " << c.in_place);
    CHECK(mismatches(y, y_ref, near_bf16) == 0);
    CHECK(mismatches(rstd, rstd_ref, near_f32) == 0);
    // dx: a difference of two terms that may cancel; bound it relative to the terms' size.
    CHECK(mismatches(dx, dx_ref, [](std::uint16_t g, double want) {
            return std::fabs(from_bf16(g) - want) <= 0x1p-8 * std::fabs(want) + 1e-3;
          }) == 0);
    // dweight: sums of 70 to 130 products, fp32: relative 1e-5 of the sum of magnitudes ~ 1e-4 abs.
    CHECK(mismatches(dweight, dw_ref, [](float g, double want) { return std::fabs(g - want) <= 1e-4; }) == 0);
  }
}

TEST_CASE("emu kernels: embedding gathers rows and accumulates repeated ids", "[emu][kernels]") {
  const std::int64_t vocab = 50, dim = 72, tokens = 300;
  const Bf16Data table = random_bf16(vocab * dim, 1.0f, 21), dout = random_bf16(tokens * dim, 1.0f, 22);
  std::vector<std::int32_t> ids(tokens);
  for (std::int64_t t = 0; t < tokens; ++t) ids[t] = static_cast<std::int32_t>((t * 7 + t / 9) % vocab);
  std::vector<std::uint16_t> out(tokens * dim);
  kc::embedding_forward(ids.data(), table.bits.data(), out.data(), tokens, dim, nullptr);
  int bad = 0;
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (std::int64_t i = 0; i < dim; ++i) bad += out[t * dim + i] != table.bits[ids[t] * dim + i];
  }
  CHECK(bad == 0);
  std::vector<float> dtable(vocab * dim, 1.0f);
  kc::embedding_backward(ids.data(), dout.bits.data(), dtable.data(), tokens, dim, nullptr);
  std::vector<double> ref(vocab * dim, 1.0);
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (std::int64_t i = 0; i < dim; ++i) ref[ids[t] * dim + i] += dout.values[t * dim + i];
  }
  CHECK(mismatches(dtable, ref, near_f32) == 0);
}
