#pragma once
// Device code of the CUDA attention (attention.cu): PTX wrappers, warp-level tile GEMMs, the four
// kernels and their tile configurations, plus the host-side tile-table builder. Private to
// attention.cu (which includes cuda_bf16.h / cuda_runtime.h before this header); see the comment
// at the top of attention.cu for the design.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "odc/kernels/cuda_attention.h"

namespace odc::kernels::cuda {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kPad = 8;  // bf16 elements of padding per shared-memory row
constexpr float kLog2e = 1.4426950408889634f;

// ---------------------------------------------------------------------------------------------
// PTX wrappers (begin)

__device__ __forceinline__ std::uint32_t smem_u32(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared copy; valid == false zero-fills the destination and reads nothing.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(smem)),
               "l"(static_cast<unsigned long long>(__cvta_generic_to_global(gmem))),
               "r"(src_bytes)
               : "memory");
}

// 4-byte variant (lse and D rows).
__device__ __forceinline__ void cp_async_4(void* smem, const void* gmem, bool valid) {
  const int src_bytes = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_u32(smem)),
               "l"(static_cast<unsigned long long>(__cvta_generic_to_global(gmem))),
               "r"(src_bytes)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most N of this thread's committed groups are still pending.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldsm_x4(std::uint32_t (&r)[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p))
               : "memory");
}

__device__ __forceinline__ void ldsm_x4_trans(std::uint32_t (&r)[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p))
               : "memory");
}

// d += a * b (16x8x16, bf16 inputs, fp32 accumulators).
__device__ __forceinline__ void mma_16816(float (&d)[4], const std::uint32_t (&a)[4],
                                          std::uint32_t b0, std::uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ std::uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (low half) = lo
  return *reinterpret_cast<const std::uint32_t*>(&v);
}

// PTX wrappers (end)
// ---------------------------------------------------------------------------------------------
// Warp-level tile GEMMs on shared tiles with row stride STRIDE (elements).

// A fragment: rows row0..row0+15, columns col0..col0+15 of a row-major [m][k] tile.
template <int STRIDE>
__device__ __forceinline__ void load_a(std::uint32_t (&a)[4], const bf16* tile, int row0, int col0,
                                       int lane) {
  ldsm_x4(a, tile + (row0 + (lane & 15)) * STRIDE + col0 + ((lane >> 4) << 3));
}

// B fragments of two 8-column blocks n0..n0+15, k-step k0..k0+15, from a tile storing B^T
// ([n][k], e.g. K for S = Q K^T): b[0], b[1] for block n0, b[2], b[3] for block n0 + 8.
template <int STRIDE>
__device__ __forceinline__ void load_b_nk(std::uint32_t (&b)[4], const bf16* tile, int n0, int k0,
                                          int lane) {
  ldsm_x4(b, tile + (n0 + (lane & 7) + ((lane >> 4) << 3)) * STRIDE + k0 +
                 (((lane >> 3) & 1) << 3));
}

// The same from a tile storing B itself ([k][n], e.g. V for O = P V), via ldmatrix.trans.
template <int STRIDE>
__device__ __forceinline__ void load_b_kn(std::uint32_t (&b)[4], const bf16* tile, int k0, int n0,
                                          int lane) {
  ldsm_x4_trans(b, tile + (k0 + (lane & 7) + (((lane >> 3) & 1) << 3)) * STRIDE + n0 +
                       ((lane >> 4) << 3));
}

// acc[16 x N] += A[16 x K] B, A = rows a_row0.. of a_tile ([m][k]), b_tile = B^T ([n][k]).
template <int K, int N, int STRIDE>
__device__ __forceinline__ void gemm_smem_nt(float (&acc)[N / 8][4], const bf16* a_tile,
                                             int a_row0, const bf16* b_tile, int lane) {
#pragma unroll
  for (int ks = 0; ks < K / 16; ++ks) {
    std::uint32_t a[4];
    load_a<STRIDE>(a, a_tile, a_row0, ks * 16, lane);
#pragma unroll
    for (int j = 0; j < N / 16; ++j) {
      std::uint32_t b[4];
      load_b_nk<STRIDE>(b, b_tile, j * 16, ks * 16, lane);
      mma_16816(acc[2 * j], a, b[0], b[1]);
      mma_16816(acc[2 * j + 1], a, b[2], b[3]);
    }
  }
}

// acc[16 x N] += A[16 x K] B, A in registers (K / 16 fragments), b_tile = B ([k][n]).
template <int K, int N, int STRIDE>
__device__ __forceinline__ void gemm_reg_nn(float (&acc)[N / 8][4],
                                            const std::uint32_t (&a)[K / 16][4],
                                            const bf16* b_tile, int lane) {
#pragma unroll
  for (int ks = 0; ks < K / 16; ++ks) {
#pragma unroll
    for (int j = 0; j < N / 16; ++j) {
      std::uint32_t b[4];
      load_b_kn<STRIDE>(b, b_tile, ks * 16, j * 16, lane);
      mma_16816(acc[2 * j], a[ks], b[0], b[1]);
      mma_16816(acc[2 * j + 1], a[ks], b[2], b[3]);
    }
  }
}

// fp32 accumulators of a 16 x K slab -> bf16 A fragments of K / 16 k-steps.
template <int K>
__device__ __forceinline__ void to_a_frags(std::uint32_t (&a)[K / 16][4], const float (&c)[K / 8][4]) {
#pragma unroll
  for (int ks = 0; ks < K / 16; ++ks) {
    a[ks][0] = pack_bf16(c[2 * ks][0], c[2 * ks][1]);
    a[ks][1] = pack_bf16(c[2 * ks][2], c[2 * ks][3]);
    a[ks][2] = pack_bf16(c[2 * ks + 1][0], c[2 * ks + 1][1]);
    a[ks][3] = pack_bf16(c[2 * ks + 1][2], c[2 * ks + 1][3]);
  }
}

template <int N>
__device__ __forceinline__ void zero(float (&c)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i) c[i][0] = c[i][1] = c[i][2] = c[i][3] = 0.0f;
}

// Rows [0, ROWS) x D of a global tile (row r at src + r * ld) into a shared tile (row stride
// D + kPad); rows >= valid_rows are zero-filled. All THREADS threads of the block take part.
template <int D, int ROWS, int THREADS>
__device__ __forceinline__ void load_tile_async(bf16* smem, const bf16* src, std::int64_t ld,
                                                int valid_rows, int tid) {
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
  static_assert((ROWS * kChunks) % THREADS == 0, "tile copy must divide evenly");
#pragma unroll
  for (int i = 0; i < ROWS * kChunks / THREADS; ++i) {
    const int c = tid + i * THREADS;
    const int r = c / kChunks;
    const int col = (c % kChunks) * 8;
    const bool ok = r < valid_rows;
    cp_async_16(smem + r * (D + kPad) + col, ok ? src + r * ld + col : src, ok);
  }
}

// Writes a warp's 16 x D fp32 accumulator slab, times `scale`, as bf16 to global memory: staged
// through `stage` (16 rows of the warp's own shared tile, which no other warp reads), then 16-byte
// stores of the rows r with r < valid_rows to dst + r * ld.
template <int D>
__device__ __forceinline__ void store_slab(const float (&acc)[D / 8][4], float scale0, float scale1,
                                           bf16* stage, bf16* dst, std::int64_t ld, int valid_rows,
                                           int lane) {
  constexpr int kStride = D + kPad;
  const int g = lane >> 2;
  const int t = lane & 3;
  __syncwarp();
#pragma unroll
  for (int nb = 0; nb < D / 8; ++nb) {
    *reinterpret_cast<std::uint32_t*>(stage + g * kStride + nb * 8 + 2 * t) =
        pack_bf16(acc[nb][0] * scale0, acc[nb][1] * scale0);
    *reinterpret_cast<std::uint32_t*>(stage + (g + 8) * kStride + nb * 8 + 2 * t) =
        pack_bf16(acc[nb][2] * scale1, acc[nb][3] * scale1);
  }
  __syncwarp();
  constexpr int kChunks = D / 8;
#pragma unroll
  for (int i = 0; i < 16 * kChunks / 32; ++i) {
    const int c = lane + i * 32;
    const int r = c / kChunks;
    const int col = (c % kChunks) * 8;
    if (r < valid_rows) {
      *reinterpret_cast<uint4*>(dst + r * ld + col) =
          *reinterpret_cast<const uint4*>(stage + r * kStride + col);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Tile table entries (int4): x = first token of the sequence, y = sequence length, z = first row of
// the tile within the sequence (w unused).

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
    attn_fwd_kernel(const int4* __restrict__ tiles, int n_heads, int group,
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
  const int4 tile = tiles[blockIdx.x / static_cast<unsigned>(n_heads)];
  const int seq_begin = tile.x, seq_len = tile.y, q0 = tile.z;
  const int kvh = h / group;
  const std::int64_t ldq = static_cast<std::int64_t>(n_heads) * D;
  const std::int64_t ldkv = static_cast<std::int64_t>(n_heads / group) * D;

  const bf16* q_src = q + (static_cast<std::int64_t>(seq_begin) + q0) * ldq + h * D;
  const bf16* k_src = k + static_cast<std::int64_t>(seq_begin) * ldkv + kvh * D;
  const bf16* v_src = v + static_cast<std::int64_t>(seq_begin) * ldkv + kvh * D;
  const int q_rows = min(kBr, seq_len - q0);
  const int n_kt = (q0 + q_rows + kBc - 1) / kBc;  // key tiles up to the tile's last row

  load_tile_async<D, kBr, kThreads>(sQ, q_src, ldq, q_rows, tid);
  load_tile_async<D, kBc, kThreads>(sK, k_src, ldkv, min(kBc, seq_len), tid);
  cp_async_commit();

  // This warp's query rows, as positions within the sequence: row_lo .. row_lo + 15; the thread
  // holds rows r0 = row_lo + g and r1 = r0 + 8.
  const int row_lo = q0 + warp * 16;
  const bool warp_valid = row_lo < seq_len;
  const int r0 = row_lo + g;
  const int r1 = r0 + 8;

  float o[D / 8][4];
  zero(o);
  float m0 = -INFINITY, m1 = -INFINITY;  // running max of the raw scores q.k
  float l0 = 0.0f, l1 = 0.0f;            // this thread's partial sums of exp2(scale_log2 (s - m))

  for (int kt = 0; kt < n_kt; ++kt) {
    const int k0 = kt * kBc;
    cp_async_wait<0>();  // K(kt) (and Q)
    __syncthreads();     // ... visible to all; every warp is done with V(kt - 1)
    load_tile_async<D, kBc, kThreads>(sV, v_src + k0 * ldkv, ldkv, min(kBc, seq_len - k0), tid);
    cp_async_commit();

    // Keys are visited in increasing order, so key 0 (visible to every row) comes first and the
    // running max is finite from the first tile on.
    const bool active = warp_valid && k0 <= row_lo + 15;
    std::uint32_t pa[kBc / 16][4];
    if (active) {
      float s[kBc / 8][4];
      zero(s);
      gemm_smem_nt<D, kBc, kStride>(s, sQ, warp * 16, sK, lane);
      if (k0 + kBc - 1 > row_lo) {  // the tile crosses this warp's diagonal: mask key > query
#pragma unroll
        for (int nb = 0; nb < kBc / 8; ++nb) {
          const int key = k0 + nb * 8 + 2 * t;
          if (key > r0) s[nb][0] = -INFINITY;
          if (key + 1 > r0) s[nb][1] = -INFINITY;
          if (key > r1) s[nb][2] = -INFINITY;
          if (key + 1 > r1) s[nb][3] = -INFINITY;
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
      load_tile_async<D, kBc, kThreads>(sK, k_src + k1 * ldkv, ldkv, min(kBc, seq_len - k1), tid);
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
    attn_bwd_dkdv_kernel(const int4* __restrict__ tiles, int n_kv_heads, int group,
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
  const int4 tile = tiles[blockIdx.x / static_cast<unsigned>(n_kv_heads)];
  const int seq_begin = tile.x, seq_len = tile.y, k0 = tile.z;
  const int n_heads = n_kv_heads * group;
  const std::int64_t ldq = static_cast<std::int64_t>(n_heads) * D;
  const std::int64_t ldkv = static_cast<std::int64_t>(n_kv_heads) * D;
  const std::int64_t kv_offset = (static_cast<std::int64_t>(seq_begin) + k0) * ldkv + kvh * D;
  const int k_rows = min(kBc, seq_len - k0);

  // Query tiles from the key tile's first row to the end of the sequence, for each query head of
  // the group: iteration it -> head kvh * group + it / n_qt, query tile first_qt + it % n_qt.
  const int first_qt = k0 / kBr;
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

  load_tile_async<D, kBc, kThreads>(sK, k + kv_offset, ldkv, k_rows, tid);
  load_tile_async<D, kBc, kThreads>(sV, v + kv_offset, ldkv, k_rows, tid);
  issue_stage(0, 0);
  cp_async_commit();

  // This warp's keys, as positions within the sequence: key_lo .. key_lo + 15; the thread holds
  // keys c0 = key_lo + g and c1 = c0 + 8 (rows of S^T).
  const int key_lo = k0 + warp * 16;
  const bool warp_valid = key_lo < seq_len;
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
    if (!warp_valid || qs + kBr - 1 < key_lo) continue;
    const bf16* sQ = sQ0 + buf * kBr * kStride;
    const bf16* sdO = sdO0 + buf * kBr * kStride;
    const float* sLse = sLse0 + buf * kBr;
    const float* sD = sD0 + buf * kBr;

    // P^T = exp(scale K Q^T - lse[query]), rows = this warp's keys, columns = the step's queries.
    float pt[kBr / 8][4];
    zero(pt);
    gemm_smem_nt<D, kBr, kStride>(pt, sK, warp * 16, sQ, lane);
    const bool edge = qs < key_lo + 16 || qs + kBr > seq_len;
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
        if (qa < c0 || qa >= seq_len) pt[nb][0] = 0.0f;
        if (qb < c0 || qb >= seq_len) pt[nb][1] = 0.0f;
        if (qa < c1 || qa >= seq_len) pt[nb][2] = 0.0f;
        if (qb < c1 || qb >= seq_len) pt[nb][3] = 0.0f;
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
  const std::int64_t out_offset = (static_cast<std::int64_t>(seq_begin) + key_lo) * ldkv + kvh * D;
  store_slab<D>(dk_acc, scale, scale, sK + warp * 16 * kStride, dk + out_offset, ldkv,
                seq_len - key_lo, lane);
  store_slab<D>(dv_acc, 1.0f, 1.0f, sV + warp * 16 * kStride, dv + out_offset, ldkv,
                seq_len - key_lo, lane);
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
    attn_bwd_dq_kernel(const int4* __restrict__ tiles, int n_heads, int group,
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
  const int4 tile = tiles[blockIdx.x / static_cast<unsigned>(n_heads)];
  const int seq_begin = tile.x, seq_len = tile.y, q0 = tile.z;
  const int kvh = h / group;
  const std::int64_t ldq = static_cast<std::int64_t>(n_heads) * D;
  const std::int64_t ldkv = static_cast<std::int64_t>(n_heads / group) * D;
  const std::int64_t q_offset = (static_cast<std::int64_t>(seq_begin) + q0) * ldq + h * D;
  const bf16* k_src = k + static_cast<std::int64_t>(seq_begin) * ldkv + kvh * D;
  const bf16* v_src = v + static_cast<std::int64_t>(seq_begin) * ldkv + kvh * D;
  const int q_rows = min(kBr, seq_len - q0);
  const int n_kt = (q0 + q_rows + kBc - 1) / kBc;

  // Groups: {Q, dO, K(0)}, {V(0)}; then per iteration {K(kt + 1)}, {V(kt + 1)} (possibly empty),
  // so "at most one pending group" alternately means K(kt) and V(kt) have landed.
  load_tile_async<D, kBr, kThreads>(sQ, q + q_offset, ldq, q_rows, tid);
  load_tile_async<D, kBr, kThreads>(sdO, dout + q_offset, ldq, q_rows, tid);
  load_tile_async<D, kBc, kThreads>(sK0, k_src, ldkv, min(kBc, seq_len), tid);
  cp_async_commit();
  load_tile_async<D, kBc, kThreads>(sV, v_src, ldkv, min(kBc, seq_len), tid);
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
                                        ldkv, min(kBc, seq_len - k1), tid);
    }
    cp_async_commit();

    const bool active = warp_valid && k0 <= row_lo + 15;
    float p[kBc / 8][4];
    if (active) {
      zero(p);
      gemm_smem_nt<D, kBc, kStride>(p, sQ, warp * 16, sK, lane);
      const bool diag = k0 + kBc - 1 > row_lo;
#pragma unroll
      for (int nb = 0; nb < kBc / 8; ++nb) {
        p[nb][0] = exp2f(fmaf(p[nb][0], scale_log2, -lse0));
        p[nb][1] = exp2f(fmaf(p[nb][1], scale_log2, -lse0));
        p[nb][2] = exp2f(fmaf(p[nb][2], scale_log2, -lse1));
        p[nb][3] = exp2f(fmaf(p[nb][3], scale_log2, -lse1));
        if (diag) {
          const int key = k0 + nb * 8 + 2 * t;
          if (key > r0) p[nb][0] = 0.0f;
          if (key + 1 > r0) p[nb][1] = 0.0f;
          if (key > r1) p[nb][2] = 0.0f;
          if (key + 1 > r1) p[nb][3] = 0.0f;
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
      load_tile_async<D, kBc, kThreads>(sV, v_src + k1 * ldkv, ldkv, min(kBc, seq_len - k1), tid);
    }
    cp_async_commit();
    if (active) gemm_reg_nn<kBc, D, kStride>(acc, fa, sK, lane);  // dQ += dS K
  }

  if (!warp_valid) return;
  store_slab<D>(acc, scale, scale, sQ + warp * 16 * kStride,
                dq + (static_cast<std::int64_t>(seq_begin) + row_lo) * ldq + h * D, ldq,
                seq_len - row_lo, lane);
}

// ---- host: tile tables ----

// Tiles of `rows` rows over every sequence, heaviest first (a stable order, so the schedule is a
// function of the shape). Causal cost of a query tile: its keys (start + rows); of a key tile: the
// queries after its start (len - start).
std::vector<int4> make_tiles(const CudaAttentionShape& s, int rows, bool key_tiles) {
  struct Entry {
    int4 tile;
    std::int64_t cost;
  };
  std::vector<Entry> entries;
  for (int i = 0; i < s.num_seqs; ++i) {
    const int begin = s.cu_seqlens[i];
    const int len = s.cu_seqlens[i + 1] - begin;
    for (int start = 0; start < len; start += rows) {
      const std::int64_t cost = key_tiles ? len - start : std::min(start + rows, len);
      entries.push_back({make_int4(begin, len, start, 0), cost});
    }
  }
  std::stable_sort(entries.begin(), entries.end(),
                   [](const Entry& a, const Entry& b) { return a.cost > b.cost; });
  std::vector<int4> tiles;
  tiles.reserve(entries.size());
  for (const Entry& e : entries) tiles.push_back(e.tile);
  return tiles;
}

}  // namespace
}  // namespace odc::kernels::cuda
