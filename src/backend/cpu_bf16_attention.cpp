#include "cpu_bf16_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "odc/core/dtype.h"
#include "odc/core/error.h"
#include "odc/kernels/attention_segments.h"

namespace odc::backend::bf16 {

namespace {

constexpr std::int64_t kKeyTile = 64;  // the CUDA kernels' key tile (FwdCfg::kBc)
constexpr float kLog2e = 1.4426950408889634f;

float round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

// The CUDA kernels' scales: formed in double, then rounded to fp32 (attention.cu, scales_for).
struct Scales {
  float scale;
  float scale_log2;
};
Scales scales_for(int head_dim) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  return {static_cast<float>(scale), static_cast<float>(scale * 1.4426950408889634)};
}

// fp32 dot product with fp32 accumulation (a tensor-core MMA's, up to the summation order).
float dot(const float* a, const float* b, int n) {
  float s = 0.0f;
  for (int i = 0; i < n; ++i) s = std::fma(a[i], b[i], s);
  return s;
}

void check(const kernels::cpu::AttentionShape& s) {
  ODC_CHECK(s.n_heads > 0 && s.n_kv_heads > 0 && s.n_heads % s.n_kv_heads == 0 && s.head_dim > 0,
            "bf16 attention: {} query heads, {} kv heads, head_dim {}", s.n_heads, s.n_kv_heads, s.head_dim);
  ODC_CHECK(s.num_seqs >= 0 && s.cu_seqlens != nullptr && s.cu_seqlens[0] == 0 &&
                s.cu_seqlens[s.num_seqs] == s.tokens,
            "bf16 attention: sequence bounds do not cover the {} tokens", s.tokens);
  kernels::check_key_segments("bf16 attention", s.cu_seqlens, s.cu_seqlens_k, s.num_seqs, s.tokens, s.key_tokens);
}

// Rows of k, v, dk, dv.
std::int64_t key_rows(const kernels::cpu::AttentionShape& s) {
  return s.cu_seqlens_k != nullptr ? s.key_tokens : s.tokens;
}

}  // namespace

void attention_forward(const kernels::cpu::AttentionShape& shape, const float* q, const float* k,
                       const float* v, float* out, float* lse) {
  check(shape);
  const int d = shape.head_dim;
  const int group = shape.n_heads / shape.n_kv_heads;
  const std::int64_t ldq = static_cast<std::int64_t>(shape.n_heads) * d;
  const std::int64_t ldkv = static_cast<std::int64_t>(shape.n_kv_heads) * d;
  const Scales sc = scales_for(d);
  std::vector<float> o(static_cast<std::size_t>(d));
  std::vector<float> scores(static_cast<std::size_t>(kKeyTile));
  for (int s = 0; s < shape.num_seqs; ++s) {
    const kernels::SegmentBounds b = kernels::segment_bounds(shape.cu_seqlens, shape.cu_seqlens_k, s);
    const std::int64_t begin = b.q_begin, len = b.q_len, kbegin = b.k_begin, off = b.offset();
    for (int h = 0; h < shape.n_heads; ++h) {
      const int kvh = h / group;
      for (std::int64_t i = 0; i < len; ++i) {
        const float* qi = q + (begin + i) * ldq + static_cast<std::int64_t>(h) * d;
        float m = -std::numeric_limits<float>::infinity();
        float l = 0.0f;
        std::fill(o.begin(), o.end(), 0.0f);
        // Keys [0, i + off] of the key segment (bottom-right diagonal; off = 0 without key segments).
        for (std::int64_t k0 = 0; k0 <= i + off; k0 += kKeyTile) {
          const std::int64_t k1 = std::min(k0 + kKeyTile, i + off + 1);  // keys after i + off are masked
          float mx = m;
          for (std::int64_t j = k0; j < k1; ++j) {
            const float sj = dot(qi, k + (kbegin + j) * ldkv + static_cast<std::int64_t>(kvh) * d, d);
            scores[static_cast<std::size_t>(j - k0)] = sj;
            mx = std::max(mx, sj);
          }
          // Key 0 is in the first tile, so mx is finite from there on.
          const float base = mx * sc.scale_log2;
          const float alpha = std::exp2(m * sc.scale_log2 - base);  // 0 while m is -inf
          m = mx;
          l *= alpha;
          for (float& x : o) x *= alpha;
          for (std::int64_t j = k0; j < k1; ++j) {
            const float p = std::exp2(std::fma(scores[static_cast<std::size_t>(j - k0)], sc.scale_log2, -base));
            l += p;
            const float pb = round_bf16(p);  // the PV product's bf16 A operand
            const float* vj = v + (kbegin + j) * ldkv + static_cast<std::int64_t>(kvh) * d;
            for (int c = 0; c < d; ++c) o[static_cast<std::size_t>(c)] = std::fma(pb, vj[c], o[static_cast<std::size_t>(c)]);
          }
        }
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        float* oi = out + (begin + i) * ldq + static_cast<std::int64_t>(h) * d;
        for (int c = 0; c < d; ++c) oi[c] = round_bf16(o[static_cast<std::size_t>(c)] * inv);
        lse[static_cast<std::int64_t>(h) * shape.tokens + begin + i] = m * sc.scale + std::log(l);
      }
    }
  }
}

void attention_backward(const kernels::cpu::AttentionShape& shape, const float* q, const float* k,
                        const float* v, const float* out, const float* lse, const float* dout,
                        float* dq, float* dk, float* dv) {
  check(shape);
  const int d = shape.head_dim;
  const int group = shape.n_heads / shape.n_kv_heads;
  const std::int64_t ldq = static_cast<std::int64_t>(shape.n_heads) * d;
  const std::int64_t ldkv = static_cast<std::int64_t>(shape.n_kv_heads) * d;
  const Scales sc = scales_for(d);
  const auto kv_elems = static_cast<std::size_t>(key_rows(shape) * ldkv);
  // fp32 accumulators of dK and dV (the GPU's registers), rounded once at the end.
  std::vector<float> dk_acc(kv_elems, 0.0f), dv_acc(kv_elems, 0.0f);
  std::vector<float> dq_row(static_cast<std::size_t>(d));
  for (int s = 0; s < shape.num_seqs; ++s) {
    const kernels::SegmentBounds b = kernels::segment_bounds(shape.cu_seqlens, shape.cu_seqlens_k, s);
    const std::int64_t begin = b.q_begin, len = b.q_len, kbegin = b.k_begin, off = b.offset();
    for (int h = 0; h < shape.n_heads; ++h) {
      const std::int64_t kv_col = static_cast<std::int64_t>(h / group) * d;
      for (std::int64_t i = 0; i < len; ++i) {
        const std::int64_t row = (begin + i) * ldq + static_cast<std::int64_t>(h) * d;
        const float* qi = q + row;
        const float* doi = dout + row;
        const float delta = dot(out + row, doi, d);  // D = rowsum(dO * O), fp32
        const float lse2 = lse[static_cast<std::int64_t>(h) * shape.tokens + begin + i] * kLog2e;
        std::fill(dq_row.begin(), dq_row.end(), 0.0f);
        for (std::int64_t j = 0; j <= i + off; ++j) {
          const std::int64_t kv = (kbegin + j) * ldkv + kv_col;
          const float p = std::exp2(std::fma(dot(qi, k + kv, d), sc.scale_log2, -lse2));
          const float ds = p * (dot(doi, v + kv, d) - delta);
          const float pb = round_bf16(p);
          const float dsb = round_bf16(ds);
          float* dvj = dv_acc.data() + kv;
          float* dkj = dk_acc.data() + kv;
          const float* kj = k + kv;
          for (int c = 0; c < d; ++c) {
            dvj[c] = std::fma(pb, doi[c], dvj[c]);
            dkj[c] = std::fma(dsb, qi[c], dkj[c]);
            dq_row[static_cast<std::size_t>(c)] = std::fma(dsb, kj[c], dq_row[static_cast<std::size_t>(c)]);
          }
        }
        for (int c = 0; c < d; ++c) dq[row + c] = round_bf16(dq_row[static_cast<std::size_t>(c)] * sc.scale);
      }
    }
  }
  for (std::size_t i = 0; i < kv_elems; ++i) {
    dk[i] = round_bf16(dk_acc[i] * sc.scale);
    dv[i] = round_bf16(dv_acc[i]);
  }
}

}  // namespace odc::backend::bf16
