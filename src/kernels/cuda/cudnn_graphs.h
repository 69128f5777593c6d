#pragma once
// The cuDNN attention's graphs and ragged batch tables (internal to cudnn_attention.cu and
// cudnn_graphs.cpp; include after <cudnn_frontend.h>, built only with ODC_HAVE_CUDNN_FRONTEND).
//
// A graph is one shape class: forward or backward, heads, head_dim, the padded batch B, the
// sequence bucket S and, for the backward, the token bucket T (kernels/cudnn_ragged.h), and
// whether the backward is deterministic. Every graph views the packed tensors the same way:
//   q/o/dout/dq  dims [B, n_heads, S, d], strides [S*n_heads*d, d, n_heads*d, 1], ragged offset
//                cu_seqlens[b] * n_heads * d (elements)
//   k/v/dk/dv    the same with n_kv_heads
//   stats        fp32 dims [B, n_heads, S, 1], strides [S*n_heads, 1, n_heads, 1], ragged offset
//                cu_seqlens[b] * n_heads: token-major [tokens, n_heads]
//   seq_len      int32 [B] (the padding mask; empty sequences pad B), the offsets int32 [B + 1]
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "odc/kernels/cuda_cudnn_attention.h"

namespace odc::kernels::cuda::cudnn_graphs {

struct GraphKey {
  bool backward = false;
  int h_q = 0, h_kv = 0, d = 0;
  std::int64_t b = 0, s = 0;
  std::int64_t t = 0;  // the backward's token bucket (max_total_seq_len_q/kv); 0 in the forward
  bool deterministic = true;
  bool operator==(const GraphKey& o) const {
    return backward == o.backward && h_q == o.h_q && h_kv == o.h_kv && d == o.d && b == o.b && s == o.s &&
           t == o.t && deterministic == o.deterministic;
  }
};

struct CachedGraph {
  GraphKey key;
  std::shared_ptr<cudnn_frontend::graph::Graph> graph;
  std::int64_t workspace = 0;  // bytes
};

// The device pointers of one call (forward: q, k, v, o, stats; backward: all).
struct Pointers {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* o = nullptr;
  void* stats = nullptr;
  const void* dout = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
};

// The per-microbatch tables on the device: sequence lengths [B] and the ragged offsets [B + 1]
// of q-like, kv-like and stats tensors, each 64-byte aligned in one block.
class RaggedBatch {
 public:
  RaggedBatch() = default;
  // The pinned staging outlives the copy that reads it.
  ~RaggedBatch() {
    if (!pending_) return;
    try {
      uploaded_.synchronize();
    } catch (...) {  // a failed device: nothing left to protect
    }
  }
  RaggedBatch(const RaggedBatch&) = delete;
  RaggedBatch& operator=(const RaggedBatch&) = delete;

  // Validates `shape` (odc::Error naming what is wrong) and uploads its tables on `stream`,
  // unless they are already there for the same bounds and heads.
  void prepare(const CudaAttentionShape& shape, DeviceAllocator& allocator, void* stream);
  GraphKey key(bool backward) const;
  const void* seq_len() const { return at(0); }
  const void* q_offsets() const { return at(1); }
  const void* kv_offsets() const { return at(2); }
  const void* stats_offsets() const { return at(3); }

 private:
  const void* at(int table) const;

  std::vector<std::int32_t> cu_seqlens_;
  int h_q_ = 0, h_kv_ = 0, d_ = 0;
  std::int64_t b_ = 0, s_ = 0, t_ = 0, stride_ = 0;  // stride_: int32 elements between tables
  bool ready_ = false;
  std::vector<std::int32_t> host_;
  PinnedBuffer pinned_;  // the upload's source
  Event uploaded_;       // behind the last upload from pinned_
  bool pending_ = false;
  DeviceBuffer device_;
};

// Built graphs, least recently used dropped beyond the capacity, and the workspace bound.
class GraphCache {
 public:
  GraphCache(bool deterministic, std::size_t capacity, std::int64_t workspace_limit)
      : deterministic_(deterministic), capacity_(capacity), workspace_limit_(workspace_limit) {}
  // The graph of `key` (its deterministic flag is the cache's), built on a miss: odc::Error with
  // cuDNN's message when cuDNN has no plan for it.
  const CachedGraph& get(GraphKey key, cudnnHandle_t handle);
  // Whether `graph` may run: its workspace within the bound. When not, the call is counted as a
  // fallback and refusal() says why.
  bool admit(const CachedGraph& graph);
  const std::string& refusal() const { return refusal_; }
  void execute(const CachedGraph& graph, const RaggedBatch& batch, const Pointers& p, cudnnHandle_t handle,
               DeviceAllocator& allocator, void* stream) const;
  CudnnAttentionStats stats() const {
    CudnnAttentionStats s = stats_;
    s.cached = lru_.size();
    return s;
  }

 private:
  bool deterministic_;
  std::size_t capacity_;
  std::int64_t workspace_limit_;  // bytes
  std::list<CachedGraph> lru_;    // most recently used first
  CudnnAttentionStats stats_;
  std::string refusal_;  // why the last refused call was refused
};

}  // namespace odc::kernels::cuda::cudnn_graphs
