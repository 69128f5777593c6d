#pragma once
// Shared pieces of the CUDA attention (attention.cu): PTX wrappers, warp-level tile GEMMs and the
// tile tables (device layout and the host-side builder). Private to attention.cu, which includes
// cuda_bf16.h / cuda_runtime.h first; the design is described at the top of attention.cu.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "odc/kernels/attention_segments.h"
#include "odc/kernels/cuda_attention.h"

namespace odc::kernels::cuda {
namespace {


using bf16 = __nv_bfloat16;

constexpr int kPad = 8;  // bf16 elements of padding per shared-memory row
constexpr float kLog2e = 1.4426950408889634f;

// ---------------------------------------------------------------------------------------------
// PTX wrappers (begin)

#if defined(ODC_CUDA_EMULATION)
// The emulated build (tests/emu compiles these sources for the CPU): the same wrappers on the
// emulator's model of each instruction (tests/emu/ptx_emu.h); the call sites are recorded so that
// a test can plant a fault at one of them.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  ::odc_emu::ptx::cp_async(smem, gmem, 16, valid);
}

__device__ __forceinline__ void cp_async_4(void* smem, const void* gmem, bool valid) {
  ::odc_emu::ptx::cp_async(smem, gmem, 4, valid);
}

__device__ __forceinline__ void cp_async_commit() { ::odc_emu::ptx::cp_async_commit(); }

template <int N>
__device__ __forceinline__ void cp_async_wait(
    std::source_location where = std::source_location::current()) {
  ::odc_emu::ptx::cp_async_wait(N, where);
}

__device__ __forceinline__ void ldsm_x4(std::uint32_t (&r)[4], const bf16* p,
                                        std::source_location where = std::source_location::current()) {
  ::odc_emu::ptx::ldmatrix_x4(r, p, false, where);
}

__device__ __forceinline__ void ldsm_x4_trans(
    std::uint32_t (&r)[4], const bf16* p,
    std::source_location where = std::source_location::current()) {
  ::odc_emu::ptx::ldmatrix_x4(r, p, true, where);
}

__device__ __forceinline__ void mma_16816(float (&d)[4], const std::uint32_t (&a)[4],
                                          std::uint32_t b0, std::uint32_t b1,
                                          std::source_location where = std::source_location::current()) {
  ::odc_emu::ptx::mma_m16n8k16_bf16(d, a, b0, b1, where);
}

#else  // nvcc

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

#endif  // ODC_CUDA_EMULATION

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


// ---- tile tables ----

// One entry of a tile table (32 bytes: two 16-byte loads): the segment's query rows
// [q_begin, q_begin + q_len) and key rows [k_begin, k_begin + k_len) (the same rows without key
// segments), and the tile's first row: of the query segment in the forward and dQ tables, of the
// key segment in the dK/dV table. A query row i of the segment sees keys [0, i + k_len - q_len].
struct alignas(16) AttnTile {
  int q_begin, q_len, start, k_begin;
  int k_len, unused0, unused1, unused2;
};

// Tiles of `rows` rows over every segment, heaviest first (a stable order, so the schedule is a
// function of the shape). Causal cost of a query tile: its keys (start + rows + offset); of a key
// tile: the queries that see its first key. Key tiles cover every key row, also those of a segment
// without queries (the dK/dV kernel writes their zeros).
std::vector<AttnTile> make_tiles(const CudaAttentionShape& s, int rows, bool key_tiles) {
  struct Entry {
    AttnTile tile;
    std::int64_t cost;
  };
  std::vector<Entry> entries;
  for (int i = 0; i < s.num_seqs; ++i) {
    const SegmentBounds b = segment_bounds(s.cu_seqlens, s.cu_seqlens_k, i);
    const std::int64_t off = b.offset();
    const std::int64_t len = key_tiles ? b.k_len : b.q_len;
    for (std::int64_t start = 0; start < len; start += rows) {
      const std::int64_t cost = key_tiles ? b.q_len - std::max<std::int64_t>(start - off, 0)
                                          : std::min<std::int64_t>(start + rows, b.q_len) + off;
      const AttnTile tile{static_cast<int>(b.q_begin), static_cast<int>(b.q_len), static_cast<int>(start),
                          static_cast<int>(b.k_begin), static_cast<int>(b.k_len), 0, 0, 0};
      entries.push_back({tile, cost});
    }
  }
  std::stable_sort(entries.begin(), entries.end(),
                   [](const Entry& a, const Entry& b) { return a.cost > b.cost; });
  std::vector<AttnTile> tiles;
  tiles.reserve(entries.size());
  for (const Entry& e : entries) tiles.push_back(e.tile);
  return tiles;
}


}  // namespace
}  // namespace odc::kernels::cuda
