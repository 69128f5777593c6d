#pragma once
// The forward kernel of the CUDA attention and its tile configuration (private to attention.cu).

#include "attention_tiles.cuh"

namespace odc::kernels::cuda {
namespace {

// ---- forward ----

template <int D>
struct FwdCfg {
  static constexpr int kWarps = 8;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kBr = kWarps * 16;
  static constexpr int kBc = 64;
  static constexpr int kStride = D + kPad;
  static constexpr int kSmemBytes = (kBr + 2 * kBc) * kStride * 2;
};

template <int D>
__global__ void __launch_bounds__(FwdCfg<D>::kThreads, 2)
    attn_fwd_kernel(const AttnTile* __restrict__ tiles, int n_heads, int group,
                    const bf16* __restrict__ q, const bf16* __restrict__ k,
                    const bf16* __restrict__ v, bf16* __restrict__ out, float* __restrict__ lse,
                    std::int64_t tokens, float scale, float scale_log2) {
  using C = FwdCfg<D>;
  constexpr int kBr = C::kBr, kBc = C::kBc, kStride = C::kStride, kThreads = C::kThreads;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* sQ = reinterpret_cast<bf16*>(smem_raw);
  bf16* sK = sQ + kBr * kStride;
  bf16* sV = sK + kBc * kStride;

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

  const bf16* q_src = q + (static_cast<std::int64_t>(seq_begin) + q0) * ldq + h * D;
  const bf16* k_src = k + static_cast<std::int64_t>(tile.k_begin) * ldkv + kvh * D;
  const bf16* v_src = v + static_cast<std::int64_t>(tile.k_begin) * ldkv + kvh * D;
  const int q_rows = min(kBr, seq_len - q0);
  const int n_kt = (q0 + q_rows + off + kBc - 1) / kBc;  // key tiles up to the tile's last row's keys

  load_tile_async<D, kBr, kThreads>(sQ, q_src, ldq, q_rows, tid);
  load_tile_async<D, kBc, kThreads>(sK, k_src, ldkv, min(kBc, key_len), tid);
  cp_async_commit();

  // This warp's query rows, as positions within the sequence: row_lo .. row_lo + 15; the thread
  // holds rows r0 = row_lo + g and r1 = r0 + 8.
  const int row_lo = q0 + warp * 16;
  const bool warp_valid = row_lo < seq_len;
  const int r0 = row_lo + g;
  const int r1 = r0 + 8;
  // The same rows as key positions: the last key each may see.
  const int row_lo_k = row_lo + off;

  float o[D / 8][4];
  zero(o);
  float m0 = -INFINITY, m1 = -INFINITY;  // running max of the raw scores q.k
  float l0 = 0.0f, l1 = 0.0f;            // this thread's partial sums of exp2(scale_log2 (s - m))

  for (int kt = 0; kt < n_kt; ++kt) {
    const int k0 = kt * kBc;
    cp_async_wait<0>();  // K(kt) (and Q)
    __syncthreads();     // ... visible to all; every warp is done with V(kt - 1)
    load_tile_async<D, kBc, kThreads>(sV, v_src + k0 * ldkv, ldkv, min(kBc, key_len - k0), tid);
    cp_async_commit();

    // Keys are visited in increasing order, so key 0 (visible to every row) comes first and the
    // running max is finite from the first tile on.
    const bool active = warp_valid && k0 <= row_lo_k + 15;
    std::uint32_t pa[kBc / 16][4];
    if (active) {
      float s[kBc / 8][4];
      zero(s);
      gemm_smem_nt<D, kBc, kStride>(s, sQ, warp * 16, sK, lane);
      if (k0 + kBc - 1 > row_lo_k) {  // the tile crosses this warp's diagonal: mask key > query + off
        const int last0 = row_lo_k + g, last1 = last0 + 8;
#pragma unroll
        for (int nb = 0; nb < kBc / 8; ++nb) {
          const int key = k0 + nb * 8 + 2 * t;
          if (key > last0) s[nb][0] = -INFINITY;
          if (key + 1 > last0) s[nb][1] = -INFINITY;
          if (key > last1) s[nb][2] = -INFINITY;
          if (key + 1 > last1) s[nb][3] = -INFINITY;
        }
      }
      float mx0 = m0, mx1 = m1;
#pragma unroll
      for (int nb = 0; nb < kBc / 8; ++nb) {
        mx0 = fmaxf(mx0, fmaxf(s[nb][0], s[nb][1]));
        mx1 = fmaxf(mx1, fmaxf(s[nb][2], s[nb][3]));
      }
      // The 4 threads of a quad hold the same two rows.
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
      const float base0 = mx0 == -INFINITY ? 0.0f : mx0 * scale_log2;
      const float base1 = mx1 == -INFINITY ? 0.0f : mx1 * scale_log2;
      const float alpha0 = exp2f(m0 * scale_log2 - base0);  // 0 while m is still -inf
      const float alpha1 = exp2f(m1 * scale_log2 - base1);
      m0 = mx0;
      m1 = mx1;
      l0 *= alpha0;
      l1 *= alpha1;
#pragma unroll
      for (int nb = 0; nb < D / 8; ++nb) {
        o[nb][0] *= alpha0;
        o[nb][1] *= alpha0;
        o[nb][2] *= alpha1;
        o[nb][3] *= alpha1;
      }
#pragma unroll
      for (int nb = 0; nb < kBc / 8; ++nb) {
        s[nb][0] = exp2f(fmaf(s[nb][0], scale_log2, -base0));
        s[nb][1] = exp2f(fmaf(s[nb][1], scale_log2, -base0));
        s[nb][2] = exp2f(fmaf(s[nb][2], scale_log2, -base1));
        s[nb][3] = exp2f(fmaf(s[nb][3], scale_log2, -base1));
        l0 += s[nb][0] + s[nb][1];
        l1 += s[nb][2] + s[nb][3];
      }
      to_a_frags<kBc>(pa, s);
    }

    cp_async_wait<0>();  // V(kt)
    __syncthreads();     // ... visible; every warp is done with K(kt)
    if (kt + 1 < n_kt) {
      const int k1 = k0 + kBc;
      load_tile_async<D, kBc, kThreads>(sK, k_src + k1 * ldkv, ldkv, min(kBc, key_len - k1), tid);
    }
    cp_async_commit();
    if (active) gemm_reg_nn<kBc, D, kStride>(o, pa, sV, lane);
  }

  if (!warp_valid) return;
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  // A valid row has l >= 1 (its max term is exp2(0)); rows past the sequence are not stored.
  const float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f;
  const float inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
  store_slab<D>(o, inv0, inv1, sQ + warp * 16 * kStride, out + (static_cast<std::int64_t>(seq_begin) + row_lo) * ldq + h * D,
                ldq, seq_len - row_lo, lane);
  if (t == 0) {
    float* lse_h = lse + static_cast<std::int64_t>(h) * tokens + seq_begin;
    if (r0 < seq_len) lse_h[r0] = m0 * scale + logf(l0);
    if (r1 < seq_len) lse_h[r1] = m1 * scale + logf(l1);
  }
}


}  // namespace
}  // namespace odc::kernels::cuda
