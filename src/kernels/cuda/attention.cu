// Causal variable-length GQA attention on the tensor cores (see cuda_attention.h for the contract).
//
// Building blocks, all per warp on 16-row slabs:
//   * mma.sync m16n8k16 bf16 -> fp32. Fragment layouts (g = lane / 4, t = lane % 4):
//       A 16x16 (4 regs): a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 8+2t..), a3 (g+8, 8+2t..)
//       B 16x8  (2 regs): b0 (k 2t..2t+1, n g), b1 (k 8+2t.., n g)
//       C 16x8  (4 f32):  c0,c1 (g, 2t..2t+1), c2,c3 (g+8, 2t..2t+1)
//     so the accumulators of two adjacent 8-column blocks are, after rounding to bf16, exactly the
//     A fragment of a 16-deep k-step (to_a_frags): P and dS never leave the registers.
//   * ldmatrix.x4 (optionally .trans) from shared tiles with rows of D + 8 elements (16 B of
//     padding: the 8 row addresses of each 8x8 matrix fall into distinct bank groups).
//   * cp.async 16-byte copies, zero-filling the rows past the end of a sequence (nothing is read
//     for them), so ragged tails need no special path; masks then only matter on the diagonal.
//
// Kernels (Br = query rows per tile, Bc = keys per tile; one 16-row slab per warp):
//   forward     Br 128 (8 warps) x Bc 64. Q stays in shared memory; K and V tiles are loaded in
//               separate cp.async groups so that V(j) arrives during S = Q K(j)^T and the softmax,
//               and K(j+1) during P V(j). Online softmax in base 2 with the running max in raw
//               score units. Smem (Br + 2 Bc) (D + 8) 2 B = 68 KiB (D = 128) / 36 KiB (D = 64).
//   bwd D       D[h, t] = sum_c dO * O (bf16 inputs, fp32), one warp per (token, head).
//   bwd dK/dV   one CTA per (key tile of 64, kv head), 4 warps x 16 keys; loops over the group's
//               query heads and the query tiles at or after the key tile (Br 32 for D = 128, 64 for
//               D = 64), double-buffered. Computes S^T = K Q^T directly, so P^T and dS^T are A
//               fragments for dV += P^T dO and dK += dS^T Q, and dK/dV (incl. the GQA sum over
//               heads) stay in registers until the end. Smem 68.5 KiB / 55 KiB.
//   bwd dQ      one CTA per (query tile of 64, head), 4 warps; loops over the key tiles up to the
//               diagonal: S, P (from lse), dP = dO V^T, dS, dQ += dS K. K double-buffered.
//               Smem 85 KiB / 45 KiB.
// Warps whose 16 rows lie entirely above the diagonal of a tile (or past the end of the sequence)
// skip its math. Tiles are scheduled from a host-built table, heaviest first, with the heads of a
// tile adjacent in the grid (the query heads of one kv group reuse K/V through L2).
// Key segments: each table entry carries its segment's query and key rows; a query at row r of
// its segment sits at key position r + (k_len - q_len), which shifts the loop bounds and masks
// above by that offset and nothing else (offset 0 without key segments).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "odc/core/error.h"
#include "odc/kernels/cuda_attention.h"
#include "odc/kernels/cuda_device.h"
#include "attention_backward.cuh"
#include "attention_forward.cuh"
#include "attention_tiles.cuh"

namespace odc::kernels::cuda {
namespace {

// ---------------------------------------------------------------------------------------------
// Host side

void require(bool ok, const std::string& message) {
  if (!ok) throw Error("cuda attention: " + message);
}

bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

void check_shape(const CudaAttentionShape& s) {
  require(s.num_seqs >= 0, "num_seqs " + std::to_string(s.num_seqs) + " < 0");
  require(s.cu_seqlens != nullptr, "cu_seqlens (host) is null");
  require(s.n_heads > 0 && s.n_kv_heads > 0 && s.n_heads % s.n_kv_heads == 0,
          "n_heads " + std::to_string(s.n_heads) + " must be a positive multiple of n_kv_heads " +
              std::to_string(s.n_kv_heads));
  require(s.head_dim == 64 || s.head_dim == 128,
          "head_dim " + std::to_string(s.head_dim) + " is not supported (64 or 128)");
  require(s.cu_seqlens[0] == 0, "cu_seqlens[0] = " + std::to_string(s.cu_seqlens[0]));
  for (int i = 0; i < s.num_seqs; ++i) {
    require(s.cu_seqlens[i + 1] >= s.cu_seqlens[i], "cu_seqlens decreases at " + std::to_string(i));
  }
  require(s.cu_seqlens[s.num_seqs] == s.tokens,
          "cu_seqlens ends at " + std::to_string(s.cu_seqlens[s.num_seqs]) + " but tokens = " +
              std::to_string(s.tokens));
  check_key_segments("cuda attention", s.cu_seqlens, s.cu_seqlens_k, s.num_seqs, s.tokens, s.key_tokens);
}

// Rows of k, v, dk, dv.
std::int64_t key_rows(const CudaAttentionShape& s) { return s.cu_seqlens_k != nullptr ? s.key_tokens : s.tokens; }

void check_pointers(std::initializer_list<const void*> pointers) {
  for (const void* p : pointers) {
    require(p != nullptr, "null device pointer");
    require(aligned16(p), "device pointers must be 16-byte aligned");
  }
}

unsigned grid_for(std::size_t n_tiles, int heads) {
  const std::uint64_t blocks = static_cast<std::uint64_t>(n_tiles) * static_cast<std::uint64_t>(heads);
  require(blocks < (std::uint64_t(1) << 31), "too many attention tiles: " + std::to_string(blocks));
  return static_cast<unsigned>(blocks);
}

template <typename Kernel>
void set_smem(Kernel kernel, int bytes, const char* what) {
  if (bytes > 48 * 1024) {
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), what);
  }
}

struct Scales {
  float scale;
  float scale_log2;
};

Scales scales_for(int head_dim) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  return {static_cast<float>(scale), static_cast<float>(scale * 1.4426950408889634)};
}

// The tile rows of each table for head dimension D.
template <int D>
struct TileRows {
  static constexpr int kForward = FwdCfg<D>::kBr;
  static constexpr int kDq = DqCfg<D>::kBr;
  static constexpr int kDkv = DkvCfg<D>::kBc;
};

// The three tables of a plan, concatenated in the device layout (AttentionPlan::device_table).
struct HostTables {
  std::vector<AttnTile> all;
  std::size_t forward = 0, dq = 0, dkv = 0;
};

template <int D>
HostTables build_tables(const CudaAttentionShape& s) {
  HostTables t;
  t.all = make_tiles(s, TileRows<D>::kForward, false);
  t.forward = t.all.size();
  const std::vector<AttnTile> dq = make_tiles(s, TileRows<D>::kDq, false);
  const std::vector<AttnTile> dkv = make_tiles(s, TileRows<D>::kDkv, true);
  t.dq = dq.size();
  t.dkv = dkv.size();
  t.all.insert(t.all.end(), dq.begin(), dq.end());
  t.all.insert(t.all.end(), dkv.begin(), dkv.end());
  return t;
}

template <int D>
void forward_impl(const AttentionPlan& plan, const bf16* q, const bf16* k, const bf16* v,
                  bf16* out, float* lse, cudaStream_t stream) {
  using C = FwdCfg<D>;
  const CudaAttentionShape& s = plan.shape();
  if (plan.forward_tiles() == 0) return;
  const unsigned grid = grid_for(plan.forward_tiles(), s.n_heads);
  const auto* table = static_cast<const AttnTile*>(plan.device_table());
  set_smem(attn_fwd_kernel<D>, C::kSmemBytes, "cudaFuncSetAttribute(attn_fwd_kernel)");
  const Scales sc = scales_for(D);
  attn_fwd_kernel<D><<<grid, C::kThreads, C::kSmemBytes, stream>>>(
      table, s.n_heads, s.n_heads / s.n_kv_heads, q, k, v, out, lse, s.tokens, sc.scale,
      sc.scale_log2);
  check_last_launch("attn_fwd_kernel");
}

template <int D>
void backward_impl(const AttentionPlan& plan, const bf16* q, const bf16* k, const bf16* v,
                   const bf16* out, const float* lse, const bf16* dout, bf16* dq, bf16* dk,
                   bf16* dv, DeviceAllocator& allocator, cudaStream_t stream) {
  using Cq = DqCfg<D>;
  using Ckv = DkvCfg<D>;
  const CudaAttentionShape& s = plan.shape();
  // No key tiles: no keys, nothing to write. (Without key segments there are dQ tiles exactly
  // when there are key tiles; with them, a key segment without queries still needs its zeros.)
  if (plan.dkv_tiles() == 0) return;
  const int group = s.n_heads / s.n_kv_heads;
  const unsigned dkv_grid = grid_for(plan.dkv_tiles(), s.n_kv_heads);
  const AttnTile* dq_table = static_cast<const AttnTile*>(plan.device_table()) + plan.forward_tiles();
  const AttnTile* dkv_table = dq_table + plan.dq_tiles();

  const std::int64_t rows = s.tokens * s.n_heads;
  DeviceBuffer dvec(allocator, static_cast<std::size_t>(std::max<std::int64_t>(rows, 1)) * sizeof(float), stream);
  if (rows > 0) {
    const std::int64_t dot_blocks = (rows * 32 + kDotThreads - 1) / kDotThreads;
    require(dot_blocks < (std::int64_t(1) << 31), "too many rows: " + std::to_string(rows));
    attn_bwd_dot_kernel<<<static_cast<unsigned>(dot_blocks), kDotThreads, 0, stream>>>(
        out, dout, dvec.as<float>(), s.tokens, s.n_heads, D);
    check_last_launch("attn_bwd_dot_kernel");
  }

  const Scales sc = scales_for(D);
  set_smem(attn_bwd_dkdv_kernel<D>, Ckv::kSmemBytes, "cudaFuncSetAttribute(attn_bwd_dkdv_kernel)");
  attn_bwd_dkdv_kernel<D><<<dkv_grid, Ckv::kThreads, Ckv::kSmemBytes, stream>>>(
      dkv_table, s.n_kv_heads, group, q, k, v, dout, lse, dvec.as<float>(), dk, dv, s.tokens,
      sc.scale, sc.scale_log2);
  check_last_launch("attn_bwd_dkdv_kernel");

  if (plan.dq_tiles() == 0) return;
  const unsigned dq_grid = grid_for(plan.dq_tiles(), s.n_heads);
  set_smem(attn_bwd_dq_kernel<D>, Cq::kSmemBytes, "cudaFuncSetAttribute(attn_bwd_dq_kernel)");
  attn_bwd_dq_kernel<D><<<dq_grid, Cq::kThreads, Cq::kSmemBytes, stream>>>(
      dq_table, s.n_heads, group, q, k, v, dout, lse, dvec.as<float>(), dq, s.tokens, sc.scale,
      sc.scale_log2);
  check_last_launch("attn_bwd_dq_kernel");
}

const bf16* as_bf16(const std::uint16_t* p) { return reinterpret_cast<const bf16*>(p); }
bf16* as_bf16(std::uint16_t* p) { return reinterpret_cast<bf16*>(p); }

void require_built(const AttentionPlan& plan, const char* what) {
  require(plan.built(), std::string(what) + " with a plan that was never built");
}

}  // namespace

// ---- AttentionPlan ----

AttentionPlan::AttentionPlan(const CudaAttentionShape& shape, DeviceAllocator& allocator,
                             void* stream, Staging staging)
    : staging_(staging) {
  build(shape, allocator, stream);
}

AttentionPlan::~AttentionPlan() { wait_for_upload(); }

void AttentionPlan::wait_for_upload() noexcept {
  if (uploaded_ && uploaded_->handle() != nullptr) {
    (void)cudaEventSynchronize(static_cast<cudaEvent_t>(uploaded_->handle()));
  }
}

void AttentionPlan::build(const CudaAttentionShape& shape, DeviceAllocator& allocator,
                          void* stream) {
  check_shape(shape);
  cu_seqlens_.assign(shape.cu_seqlens, shape.cu_seqlens + shape.num_seqs + 1);
  if (shape.cu_seqlens_k != nullptr) {
    cu_seqlens_k_.assign(shape.cu_seqlens_k, shape.cu_seqlens_k + shape.num_seqs + 1);
  } else {
    cu_seqlens_k_.clear();
  }
  shape_ = shape;
  shape_.cu_seqlens = cu_seqlens_.data();
  shape_.cu_seqlens_k = shape.cu_seqlens_k != nullptr ? cu_seqlens_k_.data() : nullptr;
  const HostTables tables =
      shape.head_dim == 64 ? build_tables<64>(shape_) : build_tables<128>(shape_);
  forward_tiles_ = tables.forward;
  dq_tiles_ = tables.dq;
  dkv_tiles_ = tables.dkv;
  built_ = true;
  const std::size_t bytes = tables.all.size() * sizeof(AttnTile);
  if (bytes == 0) return;
  if (table_.bytes() < bytes || stream_ != stream) {
    table_ = DeviceBuffer(allocator, bytes, stream);  // the old one returns on its stream
  }
  stream_ = stream;
  if (staging_ == Staging::pageable) {
    copy_to_device_async(table_.get(), tables.all.data(), bytes, stream);
    return;
  }
  wait_for_upload();  // the pinned staging is free again
  if (pinned_.bytes() < bytes) pinned_ = PinnedBuffer(bytes);
  std::copy(tables.all.begin(), tables.all.end(), pinned_.as<AttnTile>());
  copy_to_device_async(table_.get(), pinned_.get(), bytes, stream);
  if (!uploaded_) uploaded_.emplace();
  uploaded_->record(stream);
}

// ---- Kernels with a plan ----

void attention_forward(const AttentionPlan& plan, const std::uint16_t* q, const std::uint16_t* k,
                       const std::uint16_t* v, std::uint16_t* out, float* lse, void* stream) {
  require_built(plan, "attention_forward");
  const CudaAttentionShape& shape = plan.shape();
  if (shape.tokens == 0) return;
  check_pointers({q, k, v, out, lse});
  const auto st = static_cast<cudaStream_t>(stream);
  if (shape.head_dim == 64) {
    forward_impl<64>(plan, as_bf16(q), as_bf16(k), as_bf16(v), as_bf16(out), lse, st);
  } else {
    forward_impl<128>(plan, as_bf16(q), as_bf16(k), as_bf16(v), as_bf16(out), lse, st);
  }
}

void attention_backward(const AttentionPlan& plan, const std::uint16_t* q,
                        const std::uint16_t* k, const std::uint16_t* v, const std::uint16_t* out,
                        const float* lse, const std::uint16_t* dout, std::uint16_t* dq,
                        std::uint16_t* dk, std::uint16_t* dv, DeviceAllocator& allocator,
                        void* stream) {
  require_built(plan, "attention_backward");
  const CudaAttentionShape& shape = plan.shape();
  const std::int64_t keys = key_rows(shape);
  if (keys == 0) return;
  const auto st = static_cast<cudaStream_t>(stream);
  if (shape.tokens == 0) {  // key segments without any query: dk, dv are zero
    check_pointers({dk, dv});
    const std::size_t bytes = static_cast<std::size_t>(keys * shape.n_kv_heads * shape.head_dim) * sizeof(bf16);
    check_cuda(cudaMemsetAsync(dk, 0, bytes, st), "cudaMemsetAsync(dk)");
    check_cuda(cudaMemsetAsync(dv, 0, bytes, st), "cudaMemsetAsync(dv)");
    return;
  }
  check_pointers({q, k, v, out, lse, dout, dq, dk, dv});
  if (shape.head_dim == 64) {
    backward_impl<64>(plan, as_bf16(q), as_bf16(k), as_bf16(v), as_bf16(out), lse, as_bf16(dout),
                      as_bf16(dq), as_bf16(dk), as_bf16(dv), allocator, st);
  } else {
    backward_impl<128>(plan, as_bf16(q), as_bf16(k), as_bf16(v), as_bf16(out), lse,
                       as_bf16(dout), as_bf16(dq), as_bf16(dk), as_bf16(dv), allocator, st);
  }
}

// ---- Per-call forms: a one-shot plan ----

void attention_forward(const CudaAttentionShape& shape, const std::uint16_t* q,
                       const std::uint16_t* k, const std::uint16_t* v, std::uint16_t* out,
                       float* lse, DeviceAllocator& allocator, void* stream) {
  const AttentionPlan plan(shape, allocator, stream, AttentionPlan::Staging::pageable);
  attention_forward(plan, q, k, v, out, lse, stream);
}

void attention_backward(const CudaAttentionShape& shape, const std::uint16_t* q,
                        const std::uint16_t* k, const std::uint16_t* v, const std::uint16_t* out,
                        const float* lse, const std::uint16_t* dout, std::uint16_t* dq,
                        std::uint16_t* dk, std::uint16_t* dv, DeviceAllocator& allocator,
                        void* stream) {
  const AttentionPlan plan(shape, allocator, stream, AttentionPlan::Staging::pageable);
  attention_backward(plan, q, k, v, out, lse, dout, dq, dk, dv, allocator, stream);
}

double attention_forward_flops(const CudaAttentionShape& shape) {
  double pairs = 0.0;
  for (int i = 0; i < shape.num_seqs; ++i) {
    const SegmentBounds b = segment_bounds(shape.cu_seqlens, shape.cu_seqlens_k, i);
    const double len = static_cast<double>(b.q_len);
    pairs += len * (len + 1.0) / 2.0 + len * static_cast<double>(b.offset());
  }
  return 4.0 * pairs * shape.head_dim * shape.n_heads;
}

}  // namespace odc::kernels::cuda
