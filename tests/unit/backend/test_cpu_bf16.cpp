// CpuBackend's bf16 mode, op by op against its fp32 mode. Two properties per op:
//  - exactness of the rounding points: on bf16-representable inputs and weights, every output the
//    CUDA path stores in bf16 is exactly round_bf16(the fp32 mode's output), and every output it
//    keeps in fp32 (rstd, dweight, dbias, dtable, nll, loss sums) is bit-identical to fp32 mode:
//    one rounding at the store, none anywhere else;
//  - the error against fp32 mode on fp32 weights (which bf16 mode rounds in weights()) stays
//    within a bound derived from the unit roundoff u = 2^-8 of bf16 (8 significant bits, round to
//    nearest even: |round(x) - x| <= u |x|).
// Attention rounds inside (P and dS before their products), so it is bounded, not exact.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "odc/backend/cpu_backend.h"
#include "odc/core/dtype.h"
#include "odc/core/error.h"

using namespace odc;
using backend::ConstView;
using backend::CpuBackend;
using backend::View;

namespace {

constexpr double kU = 1.0 / 256.0;  // bf16 unit roundoff 2^-8

float round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

std::vector<float> random_values(std::size_t n, std::uint32_t seed, float scale = 1.0f, bool representable = true) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = representable ? round_bf16(dist(rng)) : dist(rng);
  return v;
}

std::vector<float> rounded(std::vector<float> v) {
  for (float& x : v) x = round_bf16(x);
  return v;
}

ConstView cv(const std::vector<float>& v) { return {v.data(), DType::f32, Device::cpu(), static_cast<std::int64_t>(v.size())}; }
View mv(std::vector<float>& v) { return {v.data(), DType::f32, Device::cpu(), static_cast<std::int64_t>(v.size())}; }
ConstView iv(const std::vector<std::int32_t>& v) {
  return {v.data(), DType::i32, Device::cpu(), static_cast<std::int64_t>(v.size())};
}

bool all_bf16(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [](float x) { return round_bf16(x) == x; });
}

// Count of elements where |a - b| > bound(i); 0 means the bound holds everywhere.
template <typename Bound>
int violations(const std::vector<float>& a, const std::vector<float>& b, Bound bound) {
  int bad = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!(std::abs(static_cast<double>(a[i]) - b[i]) <= bound(i))) ++bad;
  }
  return bad;
}

double normwise(const std::vector<float>& ours, const std::vector<float>& ref) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    diff += (static_cast<double>(ours[i]) - ref[i]) * (static_cast<double>(ours[i]) - ref[i]);
    norm += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(diff / norm);
}

}  // namespace

TEST_CASE("bf16 weights are a rounded copy per acquire, fp32 weights the unit itself", "[backend][bf16]") {
  CpuBackend f32(1);
  CpuBackend b16(1, DType::bf16);
  CHECK(f32.name() == "cpu");
  CHECK(b16.name() == "cpu-bf16");
  CHECK(b16.activation_dtype() == DType::f32);  // bf16-representable values in fp32 buffers
  std::vector<float> unit = random_values(37, 1, 1.0f, false);
  CHECK(f32.weights(unit.data(), 37).data == unit.data());
  CHECK(f32.live_weight_copies() == 0);

  const ConstView w = b16.weights(unit.data(), 37);
  CHECK(w.data != unit.data());
  CHECK(w.count == 37);
  const auto* copy = static_cast<const float*>(w.data);
  CHECK(std::vector<float>(copy, copy + 37) == rounded(unit));
  CHECK(b16.weights(unit.data(), 37).data == w.data);  // the same live copy
  CHECK(b16.live_weight_copies() == 1);
  CHECK_THROWS_WITH(b16.weights(unit.data(), 36), Catch::Contains("live bf16 copy of 37 elements, now asked for 36"));
  b16.release_weights(unit.data() + 1);  // not a unit with a copy: nothing happens
  CHECK(b16.live_weight_copies() == 1);
  b16.release_weights(unit.data());
  CHECK(b16.live_weight_copies() == 0);
  // After a release the next acquire sees the master's new values (an optimizer step).
  for (float& x : unit) x *= 3.0f;
  const ConstView again = b16.weights(unit.data(), 37);
  const auto* fresh = static_cast<const float*>(again.data);
  CHECK(std::vector<float>(fresh, fresh + 37) == rounded(unit));
  CHECK_THROWS_WITH(CpuBackend(1, DType::f16), Catch::Contains("float32 or bfloat16, not float16"));
}

TEST_CASE("bf16 elementwise ops round their outputs once, after the fp32 computation", "[backend][bf16]") {
  CpuBackend f32(1);
  CpuBackend b16(1, DType::bf16);
  const std::int64_t rows = 3, width = 1003;  // not a multiple of the 4-lane SIMD width
  const std::int64_t n = rows * width;
  const auto gate_up = random_values(2 * n, 2, 2.0f), dh = random_values(n, 4);
  std::vector<float> h32(n), h16(n), dgu32(2 * n), dgu16(2 * n);
  f32.swiglu_forward(cv(gate_up), mv(h32), rows, width);
  b16.swiglu_forward(cv(gate_up), mv(h16), rows, width);
  CHECK(h16 == rounded(h32));
  f32.swiglu_backward(cv(dh), cv(gate_up), mv(dgu32), rows, width);
  b16.swiglu_backward(cv(dh), cv(gate_up), mv(dgu16), rows, width);
  CHECK(dgu16 == rounded(dgu32));
  // The fused layout: row r's gate at [2r * width, (2r + 1) * width), its up after it.
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t j = 0; j < width; j += 97) {
      const double g = gate_up[static_cast<std::size_t>(2 * r * width + j)];
      const double u = gate_up[static_cast<std::size_t>(2 * r * width + width + j)];
      CHECK(h32[static_cast<std::size_t>(r * width + j)] == Approx(g / (1.0 + std::exp(-g)) * u).epsilon(1e-5));
    }
  }

  // RoPE in place, rotated by fp32 tables that both modes share.
  const std::int64_t tokens = 9;
  const int heads = 3, head_dim = 8;
  std::vector<std::int32_t> positions(tokens);
  for (std::int64_t t = 0; t < tokens; ++t) positions[static_cast<std::size_t>(t)] = static_cast<std::int32_t>(5 * t);
  const std::vector<double> inv_freq = {1.0, 0.1, 0.01, 0.001};
  std::vector<float> cos32(tokens * 4), sin32(tokens * 4), cos16(tokens * 4), sin16(tokens * 4);
  f32.rope_tables(iv(positions), tokens, inv_freq, mv(cos32), mv(sin32));
  b16.rope_tables(iv(positions), tokens, inv_freq, mv(cos16), mv(sin16));
  CHECK(cos16 == cos32);  // fp32 tables in both modes
  CHECK(sin16 == sin32);
  CHECK_FALSE(all_bf16(cos16));
  const auto x = random_values(static_cast<std::size_t>(tokens * heads * head_dim), 5);
  for (bool backward : {false, true}) {
    std::vector<float> x32 = x, x16 = x;
    if (backward) {
      f32.rope_backward(mv(x32), cv(cos32), cv(sin32), tokens, heads, head_dim);
      b16.rope_backward(mv(x16), cv(cos16), cv(sin16), tokens, heads, head_dim);
    } else {
      f32.rope_forward(mv(x32), cv(cos32), cv(sin32), tokens, heads, head_dim);
      b16.rope_forward(mv(x16), cv(cos16), cv(sin16), tokens, heads, head_dim);
    }
    CHECK(x16 == rounded(x32));
  }
}

TEST_CASE("bf16 RMSNorm: y and dx rounded, rstd and dweight fp32", "[backend][bf16]") {
  CpuBackend f32(1);
  CpuBackend b16(1, DType::bf16);
  const std::int64_t rows = 7, dim = 40;
  const auto x = random_values(rows * dim, 6, 3.0f), dy = random_values(rows * dim, 7);
  const auto dx_prior = random_values(rows * dim, 8);
  for (bool representable_weight : {true, false}) {
    const auto master = random_values(dim, 9, 1.0f, representable_weight);
    const ConstView w32 = f32.weights(master.data(), dim), w16 = b16.weights(master.data(), dim);
    std::vector<float> y32(rows * dim), y16(rows * dim), r32(rows), r16(rows);
    f32.rmsnorm_forward(cv(x), w32, mv(y32), mv(r32), rows, dim, 1e-5);
    b16.rmsnorm_forward(cv(x), w16, mv(y16), mv(r16), rows, dim, 1e-5);
    CHECK(r16 == r32);  // rstd depends on x only, and stays fp32
    CHECK(all_bf16(y16));
    for (bool accumulate : {false, true}) {
      std::vector<float> dx32 = dx_prior, dx16 = dx_prior, dw32(dim, 0.5f), dw16(dim, 0.5f);
      f32.rmsnorm_backward(cv(dy), cv(x), w32, cv(r32), mv(dx32), mv(dw32), rows, dim, accumulate);
      b16.rmsnorm_backward(cv(dy), cv(x), w16, cv(r16), mv(dx16), mv(dw16), rows, dim, accumulate);
      CHECK(all_bf16(dx16));
      CHECK(dw16 == dw32);  // dweight = sum dy * x * rstd: no weight in it, fp32 accumulator
      if (representable_weight) {
        CHECK(dx16 == rounded(dx32));
      } else {
        // dx = rstd w dy - coef x, coef = rstd^3 sum(w dy x) / dim: w's rounding moves each of the
        // two terms by at most u of its magnitude and the store adds u |dx|, so normwise the error
        // is u (1 + 2 kappa), kappa = |terms| / |dx|, which is near 1 for random data (the terms do
        // not cancel). Bound 4u = 1.6e-2; measured 2.1e-3 (without and with accumulation).
        CHECK(normwise(dx16, dx32) <= 4 * kU);
      }
    }
    if (representable_weight) {
      CHECK(y16 == rounded(y32));
    } else {
      // y = x rstd w: w rounded (u) and y stored (u): |y16 - y32| <= (2u + u^2) |y32| (+ fp32 noise).
      CHECK(violations(y16, y32, [&](std::size_t i) { return (2 * kU + kU * kU) * std::abs(y32[i]) * (1 + 1e-6); }) == 0);
    }
    f32.release_weights(master.data());
    b16.release_weights(master.data());
  }
}

TEST_CASE("bf16 linear layers: products of bf16 values accumulated in fp32, dweight and dbias fp32", "[backend][bf16]") {
  CpuBackend f32(1);
  CpuBackend b16(1, DType::bf16);
  const std::int64_t rows = 11, in = 24, out = 13;  // 13: not a multiple of the BLAS blocks
  const auto x = random_values(rows * in, 10), dy = random_values(rows * out, 11);
  const auto y_prior = random_values(rows * out, 12), dx_prior = random_values(rows * in, 13);
  for (bool representable : {true, false}) {
    // One unit holding weight [out, in] then bias [out], as the model's units do.
    const auto master = random_values(out * in + out, 14, 0.3f, representable);
    const ConstView w32u = f32.weights(master.data(), out * in + out), w16u = b16.weights(master.data(), out * in + out);
    const ConstView w32 = w32u.at(0, out * in), w16 = w16u.at(0, out * in);
    const ConstView b32 = w32u.at(out * in, out), bias16 = w16u.at(out * in, out);
    std::vector<float> y32(rows * out), y16(rows * out), a32 = y_prior, a16 = y_prior;
    f32.linear_forward(cv(x), w32, b32, mv(y32), rows, in, out);
    b16.linear_forward(cv(x), w16, bias16, mv(y16), rows, in, out);
    f32.linear_forward_add(cv(x), w32, mv(a32), rows, in, out);
    b16.linear_forward_add(cv(x), w16, mv(a16), rows, in, out);
    CHECK(all_bf16(y16));
    CHECK(all_bf16(a16));
    std::vector<float> dx32 = dx_prior, dx16 = dx_prior, dw32(out * in, 0.25f), dw16(out * in, 0.25f), db32(out, 0.5f),
                       db16(out, 0.5f);
    f32.linear_backward(cv(dy), cv(x), w32, mv(dx32), mv(dw32), mv(db32), rows, in, out, true);
    b16.linear_backward(cv(dy), cv(x), w16, mv(dx16), mv(dw16), mv(db16), rows, in, out, true);
    CHECK(all_bf16(dx16));
    CHECK(dw16 == dw32);  // dy^T x: bf16 inputs in both modes, fp32 accumulator
    CHECK(db16 == db32);
    CHECK_FALSE(all_bf16(dw16));
    if (representable) {
      CHECK(y16 == rounded(y32));
      CHECK(a16 == rounded(a32));
      CHECK(dx16 == rounded(dx32));
    } else {
      // y_j = sum_i x_i w_ji (+ b_j): each w (and b) rounded with error <= u |w|, so the sum
      // moves by <= u S_j with S_j = sum_i |x_i w_ji| + |b_j|; the store adds u |y16| <= u (|y32| +
      // u S_j). fp32 accumulation in either mode: <= in * 2^-24 S_j each. Bound per element:
      // u |y32| + (u + u^2 + 2 in 2^-24) S_j.
      auto sum_abs = [&](std::size_t idx, bool with_bias) {
        const std::size_t r = idx / out, j = idx % out;
        double s = with_bias ? std::abs(master[out * in + j]) : 0.0;
        for (std::int64_t i = 0; i < in; ++i) s += std::abs(x[r * in + i] * master[j * in + i]);
        return s;
      };
      const double slack = kU + kU * kU + 2.0 * in * std::ldexp(1.0, -24);
      CHECK(violations(y16, y32, [&](std::size_t i) { return kU * std::abs(y32[i]) + slack * sum_abs(i, true); }) == 0);
      // y += x W^T: the prior y (bf16) is exact, so the same bound with |prior| in S and |a32|.
      CHECK(violations(a16, a32, [&](std::size_t i) {
              return kU * std::abs(a32[i]) + slack * (sum_abs(i, false) + std::abs(y_prior[i]));
            }) == 0);
      // dx_i = prior_i + sum_j dy_j w_ji: the same, transposed.
      CHECK(violations(dx16, dx32, [&](std::size_t idx) {
              const std::size_t r = idx / in, i = idx % in;
              double s = std::abs(dx_prior[idx]);
              for (std::int64_t j = 0; j < out; ++j) s += std::abs(dy[r * out + j] * master[j * in + i]);
              return kU * std::abs(dx32[idx]) + (kU + kU * kU + 2.0 * out * std::ldexp(1.0, -24)) * s;
            }) == 0);
    }
    f32.release_weights(master.data());
    b16.release_weights(master.data());
  }
}

TEST_CASE("bf16 embedding and cross-entropy: rows copied exactly, dlogits rounded, losses fp32", "[backend][bf16]") {
  CpuBackend f32(1);
  CpuBackend b16(1, DType::bf16);
  const std::int64_t vocab = 29, dim = 6, tokens = 10;
  const auto master = random_values(vocab * dim, 15, 1.0f, false);
  const ConstView t16 = b16.weights(master.data(), vocab * dim);
  std::vector<std::int32_t> ids(tokens);
  for (std::int64_t t = 0; t < tokens; ++t) ids[static_cast<std::size_t>(t)] = static_cast<std::int32_t>((7 * t + 3) % vocab);
  std::vector<float> e16(tokens * dim);
  b16.embedding_forward(iv(ids), t16, mv(e16), tokens, dim);
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (std::int64_t c = 0; c < dim; ++c) {
      CHECK(e16[t * dim + c] == round_bf16(master[ids[t] * dim + c]));
    }
  }
  const auto dout = random_values(tokens * dim, 16);
  std::vector<float> dt32(vocab * dim, 0.125f), dt16(vocab * dim, 0.125f);
  f32.embedding_backward(iv(ids), cv(dout), mv(dt32), tokens, dim);
  b16.embedding_backward(iv(ids), cv(dout), mv(dt16), tokens, dim);
  CHECK(dt16 == dt32);  // fp32 accumulator of bf16 rows

  const auto logits = random_values(tokens * vocab, 17, 4.0f);
  std::vector<std::int32_t> targets(tokens);
  std::vector<float> weights(tokens);
  for (std::int64_t t = 0; t < tokens; ++t) {
    targets[static_cast<std::size_t>(t)] = static_cast<std::int32_t>((5 * t + 1) % vocab);
    weights[static_cast<std::size_t>(t)] = t % 4 == 0 ? 0.0f : 0.1f;
  }
  std::vector<float> d32 = logits, d16 = logits, nll32(tokens), nll16(tokens);
  backend::LossSums s32, s16;
  f32.cross_entropy(cv(logits), iv(targets), cv(weights), tokens, vocab, mv(d32), mv(nll32), s32);
  b16.cross_entropy(cv(logits), iv(targets), cv(weights), tokens, vocab, mv(d16), mv(nll16), s16);
  CHECK(d16 == rounded(d32));
  CHECK(nll16 == nll32);
  CHECK(s16.weighted == s32.weighted);
  CHECK(s16.nll == s32.nll);
  // In place (dlogits aliasing logits), as the model's head uses it.
  std::vector<float> inplace = logits;
  backend::LossSums s_in;
  b16.cross_entropy(cv(inplace), iv(targets), cv(weights), tokens, vocab, mv(inplace), mv(nll16), s_in);
  CHECK(inplace == d16);
}

TEST_CASE("bf16 attention: P rounded before PV, outputs and gradients bf16, lse fp32", "[backend][bf16]") {
  CpuBackend f32(1);
  CpuBackend b16(1, DType::bf16);
  // Sequences longer than the 64-key tile (several running-max updates), and a short one.
  const std::vector<std::int32_t> cu = {0, 70, 75, 205};
  const int heads = 4, kv_heads = 2, head_dim = 16;
  const std::int64_t tokens = 205, ldq = heads * head_dim, ldkv = kv_heads * head_dim;
  const backend::AttentionShape shape{iv(cu), cu, 3, tokens, heads, kv_heads, head_dim};
  const auto q = random_values(tokens * ldq, 18, 2.0f), k = random_values(tokens * ldkv, 19, 2.0f);
  const auto v = random_values(tokens * ldkv, 20), dout = random_values(tokens * ldq, 21);
  std::vector<float> o32(tokens * ldq), o16(tokens * ldq), lse32(heads * tokens), lse16(heads * tokens);
  f32.attention_forward(shape, cv(q), cv(k), cv(v), mv(o32), mv(lse32));
  b16.attention_forward(shape, cv(q), cv(k), cv(v), mv(o16), mv(lse16));
  CHECK(all_bf16(o16));
  CHECK(o16 != rounded(o32));  // the rounding of P inside, not only of the output
  CHECK_FALSE(all_bf16(lse16));
  // lse sums the unrounded probabilities: fp32 arithmetic only (order, exp2 vs exp) separates it
  // from fp32 mode, a few fp32 ulps of the row's log-sum-exp.
  CHECK(violations(lse16, lse32, [&](std::size_t i) { return 1e-5 * (1.0 + std::abs(lse32[i])); }) == 0);
  // out = sum_j bf16(p_j) v_j / l: each p_j carries one rounding (u p_j), so the sum moves by at
  // most u sum_j p_j |v_jc| / l <= u max_j |v_jc| (keys j of the row); the store adds u |out|.
  // fp32 noise of either mode (1e-5 of max|v|) on top.
  CHECK(violations(o16, o32, [&](std::size_t idx) {
          const std::int64_t t = static_cast<std::int64_t>(idx) / ldq, col = static_cast<std::int64_t>(idx) % ldq;
          const std::int64_t h = col / head_dim, c = col % head_dim, kv_col = (h / (heads / kv_heads)) * head_dim + c;
          std::int64_t seq_begin = 0;
          for (std::int32_t b : cu) seq_begin = b <= t ? b : seq_begin;
          double max_v = 0;
          for (std::int64_t j = seq_begin; j <= t; ++j) max_v = std::max(max_v, double(std::abs(v[j * ldkv + kv_col])));
          return kU * (1 + kU) * (std::abs(o32[idx]) + max_v) + 1e-5 * max_v;
        }) == 0);

  std::vector<float> dq32(q.size()), dk32(k.size()), dv32(v.size()), dq16(q.size()), dk16(k.size()), dv16(v.size());
  f32.attention_backward(shape, cv(q), cv(k), cv(v), cv(o32), cv(lse32), cv(dout), mv(dq32), mv(dk32), mv(dv32));
  b16.attention_backward(shape, cv(q), cv(k), cv(v), cv(o16), cv(lse16), cv(dout), mv(dq16), mv(dk16), mv(dv16));
  CHECK(all_bf16(dq16));
  CHECK(all_bf16(dk16));
  CHECK(all_bf16(dv16));
  // dV = sum_i bf16(p_ij) dO_i: one rounding per term (u) and the store (u): normwise <= 2u.
  // dQ, dK = scale sum bf16(dS) K|Q with dS = P (dP - D): one rounding per term and the store as
  // well, but dS sums to zero over a row (softmax's shift invariance), so the terms cancel and the
  // error relative to the result can exceed 2u; D also comes from the bf16 (not fp32) output.
  // Measured (this shape): dv 2.1e-3, dq 4.8e-3, dk 4.3e-3; bounds 2u = 7.8e-3 and 4u = 1.6e-2.
  CHECK(normwise(dv16, dv32) <= 2 * kU);
  CHECK(normwise(dq16, dq32) <= 4 * kU);
  CHECK(normwise(dk16, dk32) <= 4 * kU);
}
