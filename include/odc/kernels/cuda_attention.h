#pragma once
// CUDA causal attention over packed variable-length sequences with grouped-query heads (built when
// the CUDA backend is enabled): the semantics, layouts and scale of cpu::attention_forward /
// attention_backward (attention.h), in bf16 storage with fp32 accumulation on the tensor cores
// (mma.sync m16n8k16), FlashAttention-2 style: query tiles with an online softmax, the
// log-sum-exp saved, and a backward that recomputes the probabilities from it.
//
// Layouts (row-major, bf16 as std::uint16_t bit patterns, all device pointers):
//   q, out, dout, dq: [tokens, n_heads * head_dim];  k, v, dk, dv: [tokens, n_kv_heads * head_dim];
//   lse: fp32 [n_heads, tokens] (natural log of the sum of exp(scale * q.k) over the row's keys).
// scale = 1/sqrt(head_dim); query head h uses kv head h / (n_heads / n_kv_heads).
// Supported head_dim: 64 and 128 (anything else throws odc::Error). Device pointers must be
// 16-byte aligned (cudaMalloc'ed buffers and head-aligned offsets into them are).
//
// Key segments (context parallelism; kernels/attention_segments.h): with cu_seqlens_k, segment s's
// queries attend to rows [cu_seqlens_k[s], cu_seqlens_k[s+1]) of k and v ([key_tokens, ...], dk
// and dv likewise), query row i seeing keys [0, i + k_len - q_len] (the diagonal aligned at the
// end). The kernels are the same: a segment's key count and its diagonal's offset come with each
// tile of the table, offset 0 without key segments (then every operation, and so every output
// bit, is what it was before key segments existed). Key tiles of a segment without queries write
// zero dk/dv.
//
// Work distribution: the sequence bounds are read on the host (cu_seqlens) to build small tables
// of (sequence, tile) entries, heaviest tiles first. An AttentionPlan builds the forward, dQ and
// dK/dV tables once per microbatch, stages them in pinned memory and uploads them with one
// asynchronous copy; every layer's forward and backward then reuses the plan's device table. (The
// per-call overloads without a plan build a one-shot plan each time.) Query tiles that lie
// entirely above the causal diagonal are never visited.
//
// Determinism: every output element is produced by exactly one thread block with a fixed
// reduction order and no atomics, so forward and backward are bitwise reproducible run to run.
// The backward runs three kernels: D = rowsum(dout * out); dK/dV per key tile (looping over the
// query tiles and over the query heads of the kv group, so the GQA sum over a group's heads
// happens in registers); dQ per query tile (looping over the key tiles). dQ therefore recomputes
// the scores and dP = dO V^T instead of accumulating atomically: 7 tile GEMMs per (query tile,
// key tile) instead of the 5 of an atomic dQ, in exchange for determinism and no fp32 dQ buffer.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "odc/kernels/cuda_device.h"

namespace odc::kernels::cuda {

struct CudaAttentionShape {
  // Host copy of the sequence bounds: num_seqs + 1 entries, cu_seqlens[0] == 0, non-decreasing,
  // cu_seqlens[num_seqs] == tokens. Only read on the host, during the call (scheduling and
  // validation); the kernels get the bounds through the uploaded tile table, so no device copy
  // of cu_seqlens is needed. Empty sequences are allowed.
  const std::int32_t* cu_seqlens = nullptr;
  int num_seqs = 0;
  std::int64_t tokens = 0;
  int n_heads = 0;
  int n_kv_heads = 0;  // n_heads must be a multiple of n_kv_heads
  int head_dim = 0;    // 64 or 128
  // Host copy of the key segments' bounds (num_seqs + 1 entries, cu_seqlens_k[num_seqs] ==
  // key_tokens), or null: the keys are the query rows. Read on the host only, like cu_seqlens.
  const std::int32_t* cu_seqlens_k = nullptr;
  std::int64_t key_tokens = 0;
};

// The tile tables of one microbatch (its sequence bounds and head shape), built on the host once
// and kept on the device, for every layer's attention_forward / attention_backward:
//
//   AttentionPlan plan(shape, allocator, stream);       // once per microbatch
//   for each layer: attention_forward(plan, q, k, v, out, lse, stream);
//   for each layer: attention_backward(plan, ..., allocator, stream);
//   plan.build(next_shape, allocator, stream);         // next microbatch, storage reused
//
// The device table is written by an asynchronous copy on the build stream: kernels on that
// stream see it; another stream must first wait for an Event recorded after build(). It lives
// until the plan is rebuilt or destroyed (then it returns to `allocator` ordered on the build
// stream, so kernels already queued there still read it). With Staging::pinned (the default) the
// host tables go through the plan's pinned buffer, so the upload does not block the host;
// rebuilding and destruction first wait for the previous upload (not for any kernel) before the
// pinned memory is reused or freed. Staging::pageable copies from pageable memory (the copy has
// read it when build returns, so destruction never waits): for one-off calls.
class AttentionPlan {
 public:
  enum class Staging : std::uint8_t { pinned, pageable };

  AttentionPlan() = default;
  // Validates `shape` (odc::Error on bad bounds, heads or head_dim) and builds; see build().
  AttentionPlan(const CudaAttentionShape& shape, DeviceAllocator& allocator, void* stream,
                Staging staging = Staging::pinned);
  ~AttentionPlan();
  AttentionPlan(const AttentionPlan&) = delete;
  AttentionPlan& operator=(const AttentionPlan&) = delete;
  AttentionPlan(AttentionPlan&& other) noexcept = default;
  AttentionPlan& operator=(AttentionPlan&&) = delete;  // use build() to reuse a plan

  // (Re)builds for `shape`: copies its host cu_seqlens (and cu_seqlens_k; the caller's arrays are not read
  // afterwards), builds the tables and uploads them on `stream` (a cudaStream_t; nullptr = legacy
  // default stream). The device table is reused when it is large enough and on the same stream.
  void build(const CudaAttentionShape& shape, DeviceAllocator& allocator, void* stream);

  // The shape it was built for; cu_seqlens (cu_seqlens_k) points to the plan's own host copy.
  const CudaAttentionShape& shape() const { return shape_; }
  bool built() const { return built_; }

  // For the attention kernels (attention.cu): the device table of 32-byte tile entries, the
  // forward tiles first, then the dQ tiles, then the dK/dV tiles.
  const void* device_table() const { return table_.get(); }
  std::size_t forward_tiles() const { return forward_tiles_; }
  std::size_t dq_tiles() const { return dq_tiles_; }
  std::size_t dkv_tiles() const { return dkv_tiles_; }
  void* stream() const { return stream_; }

 private:
  void wait_for_upload() noexcept;

  CudaAttentionShape shape_{};
  std::vector<std::int32_t> cu_seqlens_;
  std::vector<std::int32_t> cu_seqlens_k_;  // empty without key segments
  std::size_t forward_tiles_ = 0, dq_tiles_ = 0, dkv_tiles_ = 0;
  Staging staging_ = Staging::pinned;
  bool built_ = false;
  void* stream_ = nullptr;
  PinnedBuffer pinned_;
  DeviceBuffer table_;
  std::optional<Event> uploaded_;  // recorded after the last pinned upload
};

// Forward with a plan: out, lse overwritten, asynchronous on `stream` (see AttentionPlan for the
// stream rule). Pointers as below.
void attention_forward(const AttentionPlan& plan, const std::uint16_t* q, const std::uint16_t* k,
                       const std::uint16_t* v, std::uint16_t* out, float* lse, void* stream);

// Backward with a plan: dq, dk, dv overwritten (none may alias an input; dk/dv rows no query
// attends to are zero). out and lse are the
// forward's. Uses a fp32 workspace of n_heads * tokens floats (D) from `allocator` on `stream`.
void attention_backward(const AttentionPlan& plan, const std::uint16_t* q,
                        const std::uint16_t* k, const std::uint16_t* v, const std::uint16_t* out,
                        const float* lse, const std::uint16_t* dout, std::uint16_t* dq,
                        std::uint16_t* dk, std::uint16_t* dv, DeviceAllocator& allocator,
                        void* stream);

// The per-call forms: build a one-shot plan (Staging::pageable) from `shape` on `stream`, then run
// the planned kernel. Each call pays the host-side table build and a small upload.
// out, lse overwritten. Asynchronous on `stream` (a cudaStream_t; nullptr = legacy default).
void attention_forward(const CudaAttentionShape& shape, const std::uint16_t* q,
                       const std::uint16_t* k, const std::uint16_t* v, std::uint16_t* out,
                       float* lse, DeviceAllocator& allocator, void* stream);

// dq, dk, dv overwritten (none may alias an input). out and lse are the forward's. Uses a fp32
// workspace of n_heads * tokens floats (D) from `allocator` on `stream`.
void attention_backward(const CudaAttentionShape& shape, const std::uint16_t* q,
                        const std::uint16_t* k, const std::uint16_t* v, const std::uint16_t* out,
                        const float* lse, const std::uint16_t* dout, std::uint16_t* dq,
                        std::uint16_t* dk, std::uint16_t* dv, DeviceAllocator& allocator,
                        void* stream);

// Causal attention FLOPs of one forward: 4 * sum_i s_i (s_i + 1) / 2 * head_dim * n_heads (the
// QK^T and PV GEMMs over the unmasked pairs; with key segments each query row also sees the
// k_len - q_len keys before its segment; plan.shape() gives a plan's shape). A backward is
// conventionally counted as 2.5x this.
double attention_forward_flops(const CudaAttentionShape& shape);

}  // namespace odc::kernels::cuda
