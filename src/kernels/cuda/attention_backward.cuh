#pragma once
// The backward kernels of the CUDA attention (D = rowsum(dO * O), dK/dV, dQ) and their tile
// configurations (private to attention.cu).

#include "attention_tiles.cuh"

namespace odc::kernels::cuda {
namespace {

// ---- backward: D = rowsum(dO * O) ----

constexpr int kDotThreads = 256;

// One warp per (token, head) row of head_dim elements; dvec is [n_heads, tokens].
__global__ void __launch_bounds__(kDotThreads)
    attn_bwd_dot_kernel(const bf16* __restrict__ out, const bf16* __restrict__ dout,
                        float* __restrict__ dvec, std::int64_t tokens, int n_heads, int head_dim) {
  const std::int64_t row =
      (static_cast<std::int64_t>(blockIdx.x) * kDotThreads + threadIdx.x) >> 5;
  const int lane = static_cast<int>(threadIdx.x & 31);
  if (row >= tokens * n_heads) return;  // uniform per warp
  const auto* o2 = reinterpret_cast<const __nv_bfloat162*>(out + row * head_dim);
  const auto* d2 = reinterpret_cast<const __nv_bfloat162*>(dout + row * head_dim);
  float sum = 0.0f;
  for (int i = lane; i < head_dim / 2; i += 32) {
    const float2 a = __bfloat1622float2(o2[i]);
    const float2 b = __bfloat1622float2(d2[i]);
    sum = fmaf(a.x, b.x, sum);
    sum = fmaf(a.y, b.y, sum);
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (lane == 0) {
    const std::int64_t token = row / n_heads;
    const int h = static_cast<int>(row % n_heads);
    dvec[static_cast<std::int64_t>(h) * tokens + token] = sum;
  }
}

// ---- backward: dK, dV ----

template <int D>
struct DkvCfg {
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kBc = kWarps * 16;      // keys per CTA (16 per warp)
  static constexpr int kBr = D == 128 ? 32 : 64;  // queries per step
  static constexpr int kStride = D + kPad;
  static constexpr int kSmemBytes =
      2 * kBc * kStride * 2              // K, V
      + 2 * 2 * kBr * kStride * 2        // Q, dO, double-buffered
      + 2 * 2 * kBr * 4;                 // lse, D, double-buffered
  static_assert(kBc % kBr == 0, "key tiles start on a query-tile boundary");
};

template <int D>
__global__ void __launch_bounds__(DkvCfg<D>::kThreads)
    attn_bwd_dkdv_kernel(const AttnTile* __restrict__ tiles, int n_kv_heads, int group,
                         const bf16* __restrict__ q, const bf16* __restrict__ k,
                         const bf16* __restrict__ v, const bf16* __restrict__ dout,
                         const float* __restrict__ lse, const float* __restrict__ dvec,
                         bf16* __restrict__ dk, bf16* __restrict__ dv, std::int64_t tokens,
                         float scale, float scale_log2) {
  using C = DkvCfg<D>;
  constexpr int kBr = C::kBr, kBc = C::kBc, kStride = C::kStride, kThreads = C::kThreads;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* sK = reinterpret_cast<bf16*>(smem_raw);
  bf16* sV = sK + kBc * kStride;
  bf16* sQ0 = sV + kBc * kStride;        // stage b: sQ0 + b * kBr * kStride
  bf16* sdO0 = sQ0 + 2 * kBr * kStride;  // stage b: sdO0 + b * kBr * kStride
  float* sLse0 = reinterpret_cast<float*>(sdO0 + 2 * kBr * kStride);  // stage b: + b * kBr
  float* sD0 = sLse0 + 2 * kBr;

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int g = lane >> 2;
  const int t = lane & 3;
  const int kvh = static_cast<int>(blockIdx.x % static_cast<unsigned>(n_kv_heads));
  const AttnTile tile = tiles[blockIdx.x / static_cast<unsigned>(n_kv_heads)];
  const int seq_begin = tile.q_begin, seq_len = tile.q_len, k0 = tile.start;
  // Query row r sees keys [0, r + off] of its key segment (off = 0 without key segments).
  const int key_len = tile.k_len, off = tile.k_len - tile.q_len;
  const int n_heads = n_kv_heads * group;
  const std::int64_t ldq = static_cast<std::int64_t>(n_heads) * D;
  const std::int64_t ldkv = static_cast<std::int64_t>(n_kv_heads) * D;
  const std::int64_t kv_offset = (static_cast<std::int64_t>(tile.k_begin) + k0) * ldkv + kvh * D;
  const int k_rows = min(kBc, key_len - k0);

  // Query tiles from the one holding the first query that sees the key tile's first key (row
  // k0 - off) to the end of the sequence, for each query head of the group: iteration it -> head
  // kvh * group + it / n_qt, query tile first_qt + it % n_qt. None for a segment without queries.
  const int first_qt = max(k0 - off, 0) / kBr;
  const int n_qt = (seq_len + kBr - 1) / kBr - first_qt;
  const int n_it = group * n_qt;

  auto issue_stage = [&](int it, int buf) {
    const int h = kvh * group + it / n_qt;
    const int qs = (first_qt + it % n_qt) * kBr;
    const int rows = min(kBr, seq_len - qs);
    const std::int64_t row_offset = (static_cast<std::int64_t>(seq_begin) + qs) * ldq + h * D;
    load_tile_async<D, kBr, kThreads>(sQ0 + buf * kBr * kStride, q + row_offset, ldq, rows, tid);
    load_tile_async<D, kBr, kThreads>(sdO0 + buf * kBr * kStride, dout + row_offset, ldq, rows,
                                      tid);
    if (tid < kBr) {
      // Rows past the end read as 0; their probabilities are masked to 0 below.
      const std::int64_t idx = static_cast<std::int64_t>(h) * tokens + seq_begin + qs + tid;
      const bool ok = tid < rows;
      cp_async_4(sLse0 + buf * kBr + tid, ok ? lse + idx : lse, ok);
      cp_async_4(sD0 + buf * kBr + tid, ok ? dvec + idx : dvec, ok);
    }
  };

  // A key segment without queries (n_it = 0) loads nothing: its dK/dV are zero, and the stores
  // below stage through sK/sV, which no copy may still be filling.
  if (n_it > 0) {
    load_tile_async<D, kBc, kThreads>(sK, k + kv_offset, ldkv, k_rows, tid);
    load_tile_async<D, kBc, kThreads>(sV, v + kv_offset, ldkv, k_rows, tid);
    issue_stage(0, 0);
  }
  cp_async_commit();

  // This warp's keys, as positions within the key segment: key_lo .. key_lo + 15; the thread holds
  // keys c0 = key_lo + g and c1 = c0 + 8 (rows of S^T). Query q sits at key position q + off.
  const int key_lo = k0 + warp * 16;
  const bool warp_valid = key_lo < key_len;
  const int c0 = key_lo + g;
  const int c1 = c0 + 8;

  float dk_acc[D / 8][4];
  float dv_acc[D / 8][4];
  zero(dk_acc);
  zero(dv_acc);

  for (int it = 0; it < n_it; ++it) {
    const int buf = it & 1;
    cp_async_wait<0>();  // stage `it` (and K, V)
    __syncthreads();     // ... visible; every warp is done with stage it - 1 (buffer buf ^ 1)
    if (it + 1 < n_it) issue_stage(it + 1, buf ^ 1);
    cp_async_commit();

    const int qs = (first_qt + it % n_qt) * kBr;
    // Skip when every query of the step precedes every key of this warp.
    if (!warp_valid || qs + off + kBr - 1 < key_lo) continue;
    const bf16* sQ = sQ0 + buf * kBr * kStride;
    const bf16* sdO = sdO0 + buf * kBr * kStride;
    const float* sLse = sLse0 + buf * kBr;
    const float* sD = sD0 + buf * kBr;

    // P^T = exp(scale K Q^T - lse[query]), rows = this warp's keys, columns = the step's queries.
    float pt[kBr / 8][4];
    zero(pt);
    gemm_smem_nt<D, kBr, kStride>(pt, sK, warp * 16, sQ, lane);
    const bool edge = qs + off < key_lo + 16 || qs + kBr > seq_len;
#pragma unroll
    for (int nb = 0; nb < kBr / 8; ++nb) {
      const int col = nb * 8 + 2 * t;
      const float lse_a = sLse[col] * kLog2e;
      const float lse_b = sLse[col + 1] * kLog2e;
      pt[nb][0] = exp2f(fmaf(pt[nb][0], scale_log2, -lse_a));
      pt[nb][1] = exp2f(fmaf(pt[nb][1], scale_log2, -lse_b));
      pt[nb][2] = exp2f(fmaf(pt[nb][2], scale_log2, -lse_a));
      pt[nb][3] = exp2f(fmaf(pt[nb][3], scale_log2, -lse_b));
      if (edge) {
        const int qa = qs + col;  // query positions of columns col, col + 1
        const int qb = qa + 1;
        if (qa + off < c0 || qa >= seq_len) pt[nb][0] = 0.0f;
        if (qb + off < c0 || qb >= seq_len) pt[nb][1] = 0.0f;
        if (qa + off < c1 || qa >= seq_len) pt[nb][2] = 0.0f;
        if (qb + off < c1 || qb >= seq_len) pt[nb][3] = 0.0f;
      }
    }
    std::uint32_t fa[kBr / 16][4];
    to_a_frags<kBr>(fa, pt);
    gemm_reg_nn<kBr, D, kStride>(dv_acc, fa, sdO, lane);  // dV += P^T dO

    // dS^T = P^T * (dP^T - D[query]), dP^T = V dO^T.
    float dst[kBr / 8][4];
    zero(dst);
    gemm_smem_nt<D, kBr, kStride>(dst, sV, warp * 16, sdO, lane);
#pragma unroll
    for (int nb = 0; nb < kBr / 8; ++nb) {
      const int col = nb * 8 + 2 * t;
      const float da = sD[col];
      const float db = sD[col + 1];
      dst[nb][0] = pt[nb][0] * (dst[nb][0] - da);
      dst[nb][1] = pt[nb][1] * (dst[nb][1] - db);
      dst[nb][2] = pt[nb][2] * (dst[nb][2] - da);
      dst[nb][3] = pt[nb][3] * (dst[nb][3] - db);
    }
    to_a_frags<kBr>(fa, dst);
    gemm_reg_nn<kBr, D, kStride>(dk_acc, fa, sQ, lane);  // dK += dS^T Q (scaled at the end)
  }

  if (!warp_valid) return;
  // Each warp's rows of sK / sV are read only by that warp: reuse them to stage the output.
  const std::int64_t out_offset = (static_cast<std::int64_t>(tile.k_begin) + key_lo) * ldkv + kvh * D;
  store_slab<D>(dk_acc, scale, scale, sK + warp * 16 * kStride, dk + out_offset, ldkv,
                key_len - key_lo, lane);
  store_slab<D>(dv_acc, 1.0f, 1.0f, sV + warp * 16 * kStride, dv + out_offset, ldkv,
                key_len - key_lo, lane);
}

// ---- backward: dQ ----

template <int D>
struct DqCfg {
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kBr = kWarps * 16;
  static constexpr int kBc = 64;
  static constexpr int kStride = D + kPad;
  static constexpr int kSmemBytes = (2 * kBr + 3 * kBc) * kStride * 2;  // Q, dO, 2 x K, V
};

template <int D>
__global__ void __launch_bounds__(DqCfg<D>::kThreads)
    attn_bwd_dq_kernel(const AttnTile* __restrict__ tiles, int n_heads, int group,
                       const bf16* __restrict__ q, const bf16* __restrict__ k,
                       const bf16* __restrict__ v, const bf16* __restrict__ dout,
                       const float* __restrict__ lse, const float* __restrict__ dvec,
                       bf16* __restrict__ dq, std::int64_t tokens, float scale, float scale_log2) {
  using C = DqCfg<D>;
  constexpr int kBr = C::kBr, kBc = C::kBc, kStride = C::kStride, kThreads = C::kThreads;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* sQ = reinterpret_cast<bf16*>(smem_raw);
  bf16* sdO = sQ + kBr * kStride;
  bf16* sK0 = sdO + kBr * kStride;  // buffer b: sK0 + b * kBc * kStride
  bf16* sV = sK0 + 2 * kBc * kStride;

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int g = lane >> 2;
  const int t = lane & 3;
  const int h = static_cast<int>(blockIdx.x % static_cast<unsigned>(n_heads));
  const AttnTile tile = tiles[blockIdx.x / static_cast<unsigned>(n_heads)];
  const int seq_begin = tile.q_begin, seq_len = tile.q_len, q0 = tile.start;
  // Query row r sees keys [0, r + off] of its key segment (off = 0 without key segments).
  const int key_len = tile.k_len, off = tile.k_len - tile.q_len;
  const int kvh = h / group;
  const std::int64_t ldq = static_cast<std::int64_t>(n_heads) * D;
  const std::int64_t ldkv = static_cast<std::int64_t>(n_heads / group) * D;
  const std::int64_t q_offset = (static_cast<std::int64_t>(seq_begin) + q0) * ldq + h * D;
  const bf16* k_src = k + static_cast<std::int64_t>(tile.k_begin) * ldkv + kvh * D;
  const bf16* v_src = v + static_cast<std::int64_t>(tile.k_begin) * ldkv + kvh * D;
  const int q_rows = min(kBr, seq_len - q0);
  const int n_kt = (q0 + q_rows + off + kBc - 1) / kBc;

  // Groups: {Q, dO, K(0)}, {V(0)}; then per iteration {K(kt + 1)}, {V(kt + 1)} (possibly empty),
  // so "at most one pending group" alternately means K(kt) and V(kt) have landed.
  load_tile_async<D, kBr, kThreads>(sQ, q + q_offset, ldq, q_rows, tid);
  load_tile_async<D, kBr, kThreads>(sdO, dout + q_offset, ldq, q_rows, tid);
  load_tile_async<D, kBc, kThreads>(sK0, k_src, ldkv, min(kBc, key_len), tid);
  cp_async_commit();
  load_tile_async<D, kBc, kThreads>(sV, v_src, ldkv, min(kBc, key_len), tid);
  cp_async_commit();

  const int row_lo = q0 + warp * 16;
  const bool warp_valid = row_lo < seq_len;
  const int r0 = row_lo + g;
  const int r1 = r0 + 8;
  // Rows past the end get lse = +inf (P = 0) and D = 0.
  const float* lse_h = lse + static_cast<std::int64_t>(h) * tokens + seq_begin;
  const float* d_h = dvec + static_cast<std::int64_t>(h) * tokens + seq_begin;
  const float lse0 = r0 < seq_len ? lse_h[r0] * kLog2e : INFINITY;
  const float lse1 = r1 < seq_len ? lse_h[r1] * kLog2e : INFINITY;
  const float dd0 = r0 < seq_len ? d_h[r0] : 0.0f;
  const float dd1 = r1 < seq_len ? d_h[r1] : 0.0f;

  float acc[D / 8][4];
  zero(acc);

  for (int kt = 0; kt < n_kt; ++kt) {
    const int k0 = kt * kBc;
    const bf16* sK = sK0 + (kt & 1) * kBc * kStride;
    cp_async_wait<1>();  // K(kt)
    __syncthreads();     // ... visible; every warp is done with K(kt - 1), the other buffer
    if (kt + 1 < n_kt) {
      const int k1 = k0 + kBc;
      load_tile_async<D, kBc, kThreads>(sK0 + ((kt + 1) & 1) * kBc * kStride, k_src + k1 * ldkv,
                                        ldkv, min(kBc, key_len - k1), tid);
    }
    cp_async_commit();

    const bool active = warp_valid && k0 <= row_lo + 15 + off;
    float p[kBc / 8][4];
    if (active) {
      zero(p);
      gemm_smem_nt<D, kBc, kStride>(p, sQ, warp * 16, sK, lane);
      const bool diag = k0 + kBc - 1 > row_lo + off;
#pragma unroll
      for (int nb = 0; nb < kBc / 8; ++nb) {
        p[nb][0] = exp2f(fmaf(p[nb][0], scale_log2, -lse0));
        p[nb][1] = exp2f(fmaf(p[nb][1], scale_log2, -lse0));
        p[nb][2] = exp2f(fmaf(p[nb][2], scale_log2, -lse1));
        p[nb][3] = exp2f(fmaf(p[nb][3], scale_log2, -lse1));
        if (diag) {
          const int key = k0 + nb * 8 + 2 * t;
          if (key > r0 + off) p[nb][0] = 0.0f;
          if (key + 1 > r0 + off) p[nb][1] = 0.0f;
          if (key > r1 + off) p[nb][2] = 0.0f;
          if (key + 1 > r1 + off) p[nb][3] = 0.0f;
        }
      }
    }

    cp_async_wait<1>();  // V(kt)
    __syncthreads();
    std::uint32_t fa[kBc / 16][4];
    if (active) {
      float dp[kBc / 8][4];
      zero(dp);
      gemm_smem_nt<D, kBc, kStride>(dp, sdO, warp * 16, sV, lane);  // dP = dO V^T
#pragma unroll
      for (int nb = 0; nb < kBc / 8; ++nb) {
        dp[nb][0] = p[nb][0] * (dp[nb][0] - dd0);
        dp[nb][1] = p[nb][1] * (dp[nb][1] - dd0);
        dp[nb][2] = p[nb][2] * (dp[nb][2] - dd1);
        dp[nb][3] = p[nb][3] * (dp[nb][3] - dd1);
      }
      to_a_frags<kBc>(fa, dp);
    }
    __syncthreads();  // every warp is done with V(kt)
    if (kt + 1 < n_kt) {
      const int k1 = k0 + kBc;
      load_tile_async<D, kBc, kThreads>(sV, v_src + k1 * ldkv, ldkv, min(kBc, key_len - k1), tid);
    }
    cp_async_commit();
    if (active) gemm_reg_nn<kBc, D, kStride>(acc, fa, sK, lane);  // dQ += dS K
  }

  if (!warp_valid) return;
  store_slab<D>(acc, scale, scale, sQ + warp * 16 * kStride,
                dq + (static_cast<std::int64_t>(seq_begin) + row_lo) * ldq + h * D, ldq,
                seq_len - row_lo, lane);
}


}  // namespace
}  // namespace odc::kernels::cuda
