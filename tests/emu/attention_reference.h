#pragma once
// Causal variable-length GQA attention in float64: the reference of the emulated CUDA kernels.
// Layouts as in cuda_attention.h: q, out [tokens, n_heads, d]; k, v [tokens, n_kv_heads, d];
// lse [n_heads, tokens] (natural log of the softmax denominator of the scaled scores).
// With key segments (cu_seqlens_k), k, v, dk, dv are [key_tokens, n_kv_heads, d] and query row i
// of segment s (q_len rows) sees keys [0, i + k_len - q_len] of its key segment, written here
// straight from that definition.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace odc_emu_test {

struct AttentionCase {
  std::vector<std::int32_t> cu_seqlens;  // num_seqs + 1 entries
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  std::vector<std::int32_t> cu_seqlens_k = {};  // empty: the keys are the query rows
  std::int64_t tokens() const { return cu_seqlens.back(); }
  std::int64_t key_tokens() const { return cu_seqlens_k.empty() ? tokens() : cu_seqlens_k.back(); }
};

struct AttentionGrads {
  std::vector<double> dq, dk, dv;
};

class AttentionReference {
 public:
  AttentionReference(const AttentionCase& c, const std::vector<double>& q,
                     const std::vector<double>& k, const std::vector<double>& v)
      : c_(c), q_(q), k_(k), v_(v) {}

  // out and lse.
  void forward(std::vector<double>& out, std::vector<double>& lse) const {
    const std::int64_t T = c_.tokens();
    const int H = c_.n_heads, D = c_.head_dim;
    out.assign(static_cast<std::size_t>(T * H * D), 0.0);
    lse.assign(static_cast<std::size_t>(H * T), 0.0);
    for_each_row([&](int h, std::int64_t i, const std::vector<double>& p, std::int64_t begin, std::int64_t last,
                     double row_lse) {
      lse[h * T + i] = row_lse;
      for (std::int64_t j = begin; j <= last; ++j) {
        for (int e = 0; e < D; ++e) out[(i * H + h) * D + e] += p[j - begin] * v_[kv(j, h) + e];
      }
    });
  }

  // dq, dk, dv for the upstream gradient dout [tokens, n_heads, d].
  AttentionGrads backward(const std::vector<double>& dout) const {
    const std::int64_t T = c_.tokens(), TK = c_.key_tokens();
    const int H = c_.n_heads, D = c_.head_dim, KV = c_.n_kv_heads;
    AttentionGrads g;
    g.dq.assign(static_cast<std::size_t>(T * H * D), 0.0);
    g.dk.assign(static_cast<std::size_t>(TK * KV * D), 0.0);
    g.dv.assign(static_cast<std::size_t>(TK * KV * D), 0.0);
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    for_each_row([&](int h, std::int64_t i, const std::vector<double>& p, std::int64_t begin, std::int64_t last,
                     double) {
      const double* dO = &dout[(i * H + h) * D];
      std::vector<double> dp(p.size());
      double dsum = 0.0;
      for (std::int64_t j = begin; j <= last; ++j) {
        double s = 0.0;
        for (int e = 0; e < D; ++e) s += dO[e] * v_[kv(j, h) + e];
        dp[j - begin] = s;
        dsum += p[j - begin] * s;
      }
      for (std::int64_t j = begin; j <= last; ++j) {
        const double pj = p[j - begin];
        const double ds = pj * (dp[j - begin] - dsum) * scale;
        for (int e = 0; e < D; ++e) {
          g.dv[kv(j, h) + e] += pj * dO[e];
          g.dk[kv(j, h) + e] += ds * q_[(i * H + h) * D + e];
          g.dq[(i * H + h) * D + e] += ds * k_[kv(j, h) + e];
        }
      }
    });
    return g;
  }

 private:
  std::size_t kv(std::int64_t token, int h) const {
    const int group = c_.n_heads / c_.n_kv_heads;
    return static_cast<std::size_t>((token * c_.n_kv_heads + h / group) * c_.head_dim);
  }

  // fn(h, i, p[j - begin] for key rows j in [begin, last], begin, last, lse) for every query row.
  template <typename Fn>
  void for_each_row(Fn&& fn) const {
    const int H = c_.n_heads, D = c_.head_dim;
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    for (std::size_t s = 0; s + 1 < c_.cu_seqlens.size(); ++s) {
      const std::int64_t qbegin = c_.cu_seqlens[s], end = c_.cu_seqlens[s + 1];
      const auto& ck = c_.cu_seqlens_k.empty() ? c_.cu_seqlens : c_.cu_seqlens_k;
      const std::int64_t begin = ck[s], offset = (ck[s + 1] - ck[s]) - (end - qbegin);
      for (int h = 0; h < H; ++h) {
        for (std::int64_t i = qbegin; i < end; ++i) {
          const std::int64_t last = begin + (i - qbegin) + offset;  // the row's last key
          std::vector<double> p(static_cast<std::size_t>(last - begin + 1));
          double mx = -INFINITY;
          for (std::int64_t j = begin; j <= last; ++j) {
            double dot = 0.0;
            for (int e = 0; e < D; ++e) dot += q_[(i * H + h) * D + e] * k_[kv(j, h) + e];
            p[j - begin] = dot * scale;
            mx = std::max(mx, p[j - begin]);
          }
          double sum = 0.0;
          for (double& x : p) sum += (x = std::exp(x - mx));
          for (double& x : p) x /= sum;
          fn(h, i, p, begin, last, mx + std::log(sum));
        }
      }
    }
  }

  const AttentionCase& c_;
  const std::vector<double>& q_;
  const std::vector<double>& k_;
  const std::vector<double>& v_;
};

}  // namespace odc_emu_test
