#pragma once
// cuDNN's fused flash attention (SDPA forward and backward through the cuDNN frontend's graph API)
// over the layouts and semantics of kernels/cuda_attention.h: packed variable-length sequences
// (THD: q, out, dout, dq [tokens, n_heads * head_dim]; k, v, dk, dv [tokens, n_kv_heads *
// head_dim]; bf16), causal (top-left diagonal per sequence), grouped-query heads, scale
// 1/sqrt(head_dim), and lse fp32 [n_heads, tokens] (natural log): the same lse the native kernels
// hand out, so either backward takes either forward's lse.
//
// The sequences are a ragged batch: a padded B x S view (B = num_seqs rounded up to a power of
// two with empty sequences, S = the longest sequence rounded up to a power of two, >= 64) whose
// per-sequence start offsets (from the host cu_seqlens) and lengths (the padding mask) go to the
// device once per microbatch. cuDNN keeps its stats token-major ([tokens, n_heads], ragged);
// the forward transposes them into lse and the backward transposes lse back, in a workspace.
//
// Graphs are built once per shape class (forward or backward, n_heads, n_kv_heads, head_dim, B,
// S, the backward's token bucket, deterministic) and kept in a least-recently-used cache of
// bounded size; their workspace comes from the caller's DeviceAllocator on the call's stream. A
// call whose graph needs more workspace than the bound (kernels/cudnn_ragged.h) is not run: it
// returns false and the caller runs the native kernels.
//
// The frontend loads a CUDA runtime of its own; the first CudnnAttention pins it to the one this
// process has loaded (pin_frontend_cudart, kernels/cudnn_runtime.h) before any frontend call: the
// frontend is reached only through CudnnAttention.
//
// cuDNN is loaded at run time (dlopen of libcudnn.so.9, or the file named by ODC_CUDNN_LIBRARY):
// the binaries neither link nor need it, and the cuDNN found on the library path (e.g. the one
// PyTorch ships) serves. Without the frontend header at build time every entry point except the
// queries below throws odc::Error.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "odc/kernels/cuda_attention.h"
#include "odc/kernels/cudnn_ragged.h"
#include "odc/kernels/cudnn_runtime.h"
#include "odc/kernels/cuda_device.h"

namespace odc::kernels {
struct AttentionFacts;  // attention_choice.h
}  // namespace odc::kernels

namespace odc::kernels::cuda {

// Whether this build compiled the cuDNN path (the cuDNN frontend header was found).
bool cudnn_frontend_built();

// cudnnGetVersion() of the cuDNN loaded (once per process; major * 10000 + minor * 100 + patch),
// or 0 when none can be loaded; then *why (when given) says what failed.
int cudnn_runtime_version(std::string* why = nullptr);

// The compute capability of CUDA device `device` as major * 10 + minor (9.0 -> 90).
int compute_capability(int device);

// The libcudart the cuDNN frontend loads, settled once per process (choose_frontend_cudart over
// this process's loaded libcudart objects and the CUDART_VERSION built against) and written to
// CUDNN_FRONTEND_CUDART_LIB_NAME unless the environment already names one. CudnnAttention's
// constructor calls it; `gpu_attention --runtime-info` prints it. Needs no device.
const CudartChoice& pin_frontend_cudart();
// cudaRuntimeGetVersion() of the runtime this process calls (13000 for 13.0; 0 where it fails).
int cuda_runtime_version();

// The facts choose_attention decides on (attention_choice.h) for these heads on device `device`:
// the build, the cuDNN loaded (probed only where the frontend is built), the compute capability;
// bf16 and a deterministic backward (the native kernels' reproducibility is kept). The mode is
// the caller's. Host code (src/kernels/cuda_attention_facts.cpp): the CUDA sources are C++17.
AttentionFacts device_attention_facts(int device, int n_heads, int n_kv_heads, int head_dim);

struct CudnnAttentionStats {
  std::size_t graph_builds = 0;        // graphs built (cache misses)
  std::size_t cached = 0;              // graphs held now
  std::size_t evictions = 0;           // graphs dropped for the capacity
  std::size_t fallbacks = 0;           // calls refused for the workspace bound (the caller ran native)
  std::int64_t largest_workspace = 0;  // bytes: the most workspace of a graph that ran
};

class CudnnAttention {
 public:
  // `cache_capacity`: graphs kept (a forward and a backward per shape class), >= 2.
  // `deterministic`: the backward must give the same bits run to run (cuDNN's deterministic
  // algorithm; on devices without one, graph building fails with odc::Error).
  // `workspace_limit`: bytes of cuDNN workspace a call may take (model.cudnn_workspace_mib).
  explicit CudnnAttention(bool deterministic = true, std::size_t cache_capacity = 16,
                          std::int64_t workspace_limit = kCudnnWorkspaceLimitMiB << 20);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // Uploads the ragged tables of `shape` (host cu_seqlens read during the call) on `stream`.
  // forward/backward call it themselves when the shape's bounds differ from the prepared ones,
  // so calling it is only needed to keep the upload out of the first layer.
  void prepare(const CudaAttentionShape& shape, DeviceAllocator& allocator, void* stream);

  // out, lse overwritten; asynchronous on `stream`. Throws odc::Error when cuDNN has no plan for
  // the shape class (the message carries cuDNN's). False when the shape class's graph needs more
  // workspace than the bound: nothing was written, the caller runs the native kernels (refusal()
  // says why; stats().fallbacks counts such calls). A choice of the shape class and the bound
  // alone, so reruns make the same one.
  [[nodiscard]] bool forward(const CudaAttentionShape& shape, const std::uint16_t* q, const std::uint16_t* k,
                             const std::uint16_t* v, std::uint16_t* out, float* lse, DeviceAllocator& allocator,
                             void* stream);

  // dq, dk, dv overwritten (none may alias an input); out and lse are a forward's (either kind).
  // False as forward's.
  [[nodiscard]] bool backward(const CudaAttentionShape& shape, const std::uint16_t* q, const std::uint16_t* k,
                              const std::uint16_t* v, const std::uint16_t* out, const float* lse,
                              const std::uint16_t* dout, std::uint16_t* dq, std::uint16_t* dk, std::uint16_t* dv,
                              DeviceAllocator& allocator, void* stream);

  CudnnAttentionStats stats() const;
  // Why the last call that returned false did (empty before any).
  std::string refusal() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The padded view of a batch: kernels/cudnn_ragged.h (the buckets and tables, host code).
using kernels::cudnn_batch_bucket;
using kernels::cudnn_seqlen_bucket;

// lse [n_heads, tokens] <-> cuDNN's stats [tokens, n_heads] (fp32): dst[c * rows + r] =
// src[r * cols + c] for a [rows, cols] src. Asynchronous on `stream`.
void transpose_f32(const float* src, float* dst, std::int64_t rows, std::int64_t cols, void* stream);

}  // namespace odc::kernels::cuda
