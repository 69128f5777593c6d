#pragma once
// CudaBackend: the model's ops on one GPU (built only with CUDA; nothing CUDA-typed here, so
// host-only code may include it). Everything runs in order on one non-blocking stream:
//
//   memory       device memory from a caching allocator on that stream (zero-filled in stream
//                order, so a block freed while kernels still read it is reused only after them)
//   activations  bf16; per-row statistics, RoPE tables and per-token losses fp32
//   weights      weights(unit) casts the fp32 unit (master or gathered) to a bf16 copy kept until
//                release_weights(unit); gradients are added into the fp32 unit accumulators
//   GEMMs        cuBLASLt, bf16 inputs with fp32 accumulation (kernels/cuda_gemm.h)
//   loss sums    accumulated on the device and read once per head (resolve_loss; the policy
//                objective's: resolve_policy)
//   optimizer    deterministic sum of squares and multi-segment AdamW on fp32 device state
//
// upload() copies host index data into the staging buffer in stream order; the host vector may
// be reused as soon as the call returns (a copy from pageable memory has consumed its source
// when cudaMemcpyAsync returns). download() synchronizes.
#include <memory>

#include "odc/backend/backend.h"
#include "odc/kernels/attention_choice.h"
#include "odc/kernels/cudnn_ragged.h"

namespace odc::backend {

class CudaBackend final : public Backend {
 public:
  // Runs on CUDA device `device` (cudaSetDevice); odc::Error when it cannot be used. `attention`:
  // model.attention, settled per head shape by select_attention (or at the first attention call);
  // native when constructed directly, make_backend passes the config's (auto by default).
  // `cudnn_workspace_bytes`: model.cudnn_workspace_mib, the most workspace a cuDNN attention call
  // may take; a call that needs more runs on the native kernels (logged once per process).
  explicit CudaBackend(int device = 0, kernels::AttentionMode attention = kernels::AttentionMode::native,
                       std::int64_t cudnn_workspace_bytes = kernels::kCudnnWorkspaceLimitMiB << 20);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string_view name() const override { return "cuda"; }
  DeviceMemory& memory() override;
  DType activation_dtype() const override { return activation_dtype_of(DeviceKind::cuda); }
  std::int64_t memory_capacity(int ranks_on_host) override;
  std::int64_t allocator_peak_bytes() override;
  // The best of a few bf16 8192^3 cuBLASLt GEMMs (fp32 accumulation), in FLOP/s, as both the
  // device peak and the GEMM rate (the GEMM the linears run, at a shape that saturates the device).
  PeakFlops measure_peak_flops() override;
  // The device index and the GEMM path (cuBLASLt, bf16 in, fp32 accumulation).
  DeviceDescription describe() override;
  // cuDNN's fused attention or the native kernels, by kernels::choose_attention over this build,
  // the loaded cuDNN and the device (cuda_backend_attention.cpp). Under auto, a shape cuDNN then
  // builds no plan for falls back to the native kernels with a warning; under cudnn it is an error.
  std::string select_attention(int n_heads, int n_kv_heads, int head_dim) override;
  // The attention kernels selected so far (native until a selection).
  kernels::AttentionImpl attention_impl() const;

  ConstView weights(const float* unit, std::int64_t count) override;
  void release_weights(const float* unit) override;
  void keep_weight_copies(bool keep) override;
  void weights_changed() override;
  void forget_weight_copies() override;
  ConstView upload(std::span<const std::int32_t> host, Buffer& staging) override;
  ConstView upload(std::span<const float> host, Buffer& staging) override;
  void download(ConstView source, std::span<float> host) override;
  void copy(ConstView source, View target) override;
  void zero(View target) override;
  void add(ConstView x, View y) override;
  void gather_rows(ConstView source, ConstView rows, std::int64_t width, View target) override;
  void scatter_rows(ConstView source, ConstView rows, std::int64_t width, View target) override;

  void prepare_microbatch(const AttentionShape& shape) override;
  std::int64_t head_chunk_rows(std::int64_t vocab) const override;
  void resolve_loss(LossSums& sums) override;
  double sum_of_squares(ConstView x) override;
  void adamw_step(std::span<const AdamWSegment> segments, const kernels::AdamWParams& params) override;
  void synchronize() override;
  // CUDA events recorded on the backend's stream (a pool that grows as marks are placed and is
  // reused after reset): a mark costs the stream nothing and waits for nothing; reading a time
  // waits for its later event only.
  std::unique_ptr<OpTimeline> make_timeline() override;

  void rmsnorm_forward(ConstView x, ConstView weight, View y, View rstd, std::int64_t rows, std::int64_t dim,
                       double eps) override;
  void rmsnorm_backward(ConstView dy, ConstView x, ConstView weight, ConstView rstd, View dx, View dweight,
                        std::int64_t rows, std::int64_t dim, bool dx_accumulate) override;
  void linear_forward(ConstView x, ConstView weight, ConstView bias, View y, std::int64_t rows, std::int64_t in,
                      std::int64_t out) override;
  void linear_forward_add(ConstView x, ConstView weight, View y, std::int64_t rows, std::int64_t in,
                          std::int64_t out) override;
  void linear_forward_residual(ConstView x, ConstView weight, ConstView residual, View y, std::int64_t rows,
                               std::int64_t in, std::int64_t out) override;
  void linear_backward(ConstView dy, ConstView x, ConstView weight, View dx, View dweight, View dbias,
                       std::int64_t rows, std::int64_t in, std::int64_t out, bool dx_accumulate) override;
  void rope_tables(ConstView positions, std::int64_t tokens, const std::vector<double>& inv_freq, View cos,
                   View sin) override;
  void rope_forward(View x, ConstView cos, ConstView sin, std::int64_t tokens, int heads, int head_dim) override;
  void rope_backward(View dx, ConstView cos, ConstView sin, std::int64_t tokens, int heads, int head_dim) override;
  void attention_forward(const AttentionShape& shape, ConstView q, ConstView k, ConstView v, View out,
                         View lse) override;
  void attention_backward(const AttentionShape& shape, ConstView q, ConstView k, ConstView v, ConstView out,
                          ConstView lse, ConstView dout, View dq, View dk, View dv) override;
  void attention_cached(const CachedAttentionShape& shape, ConstView q, ConstView k_cache, ConstView v_cache,
                        View out) override;
  // Every sequence in one launch (kernels::cuda::attention_decode_batch) over a table of its
  // caches uploaded through the pinned staging: bitwise the default's per-sequence launches.
  void attention_decode_batch(const DecodeAttentionShape& shape, ConstView q, ConstView k_new, ConstView v_new,
                              std::span<const View> k_caches, std::span<const View> v_caches, View out) override;
  void swiglu_forward(ConstView gate_up, View h, std::int64_t rows, std::int64_t width) override;
  void swiglu_backward(ConstView dh, ConstView gate_up, View dgate_up, std::int64_t rows, std::int64_t width) override;
  void embedding_forward(ConstView ids, ConstView table, View out, std::int64_t tokens, std::int64_t dim) override;
  void embedding_backward(ConstView ids, ConstView dout, View dtable, std::int64_t tokens, std::int64_t dim) override;
  void scale(View x, double alpha) override;  // bf16 activations, in place on the stream
  void cross_entropy(ConstView logits, ConstView targets, ConstView weights, std::int64_t rows, std::int64_t vocab,
                     View dlogits, View nll, LossSums& sums) override;
  // The policy objective on the stream (cuda_backend_policy.cpp): entropies of the bf16 logits
  // rows; the coefficients, whose sums accumulate on the device across a head's chunks until
  // resolve_policy reads them (one copy and synchronization per head).
  void row_entropy(ConstView logits, std::int64_t rows, std::int64_t vocab, View out) override;
  void policy_coefficients(ConstView nll, ConstView old_logp, ConstView advantages, ConstView ref_logp,
                           ConstView weights, ConstView entropy, std::int64_t rows,
                           const kernels::PolicyLossParams& params, View coef, kernels::PolicyLossSums& sums) override;
  void resolve_policy(kernels::PolicyLossSums& sums) override;

  // The stream every op runs on (a cudaStream_t): the comms order their work against it.
  void* native_stream() const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace odc::backend
