#pragma once
// ProfilingBackend: a Backend that runs every call on another one and, while recording, times
// each op where it runs. It forwards every virtual of backend.h, so it stands in for any Backend
// (LlamaModel, bench::ResidentWeights); outside start()/stop() it only forwards.
//
// Timing: around each op a mark is placed on the inner backend's timeline (Backend::make_timeline:
// CUDA events on the backend's stream; the host clock after synchronize() on the CPU), one before
// and one after, and the time between the two is the op's. On a GPU a mark runs in stream order,
// so the pair spans the op's device time; where the host is slower than the device, the device
// idles between one op's end mark and the next op's start mark, which no op is charged for: the
// step's wall time less the ops' sum is that gap (ProfileDocument::table says it).
//
// Categories: an op's name, refined by a role: GEMM calls get one from a caller-supplied
// classifier (the op, its rows/in/out and the ops recorded so far), weights() calls are "cast"
// (a compute copy made) or "reuse" (a live or kept copy handed out again), the others none. Each
// call is charged its FLOPs and bytes (backend/op_costs.h).
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "odc/backend/backend.h"
#include "odc/backend/op_profile.h"
#include "odc/backend/weight_copies.h"

namespace odc::backend {

// One GEMM call as the classifier sees it.
struct GemmCall {
  std::string_view op;  // linear_forward | linear_forward_add | linear_forward_residual | linear_backward
  std::int64_t rows = 0;
  std::int64_t in = 0;
  std::int64_t out = 0;
};
// An op recorded before it, in issue order since start().
struct OpRecord {
  std::string_view op;
  std::string role;
};
using GemmClassifier = std::function<std::string(const GemmCall& call, std::span<const OpRecord> before)>;

// The GEMM roles of a LLaMA-style decoder (model/llama_model.cpp, decoder_layer.cpp) of these
// dimensions: "q", "k", "v", "o_proj", "gate_up", "down", "lm_head". Shapes alone cannot tell
// them apart (k and v are always alike; q and o_proj are where q_dim == hidden; gate_up and
// lm_head where 2 x intermediate == vocab), so the role comes from the op order: forward, q/k/v
// are the GEMMs after the input norm (the first rmsnorm_forward not after o_proj), o_proj the one
// after attention (or RoPE, under selective recomputation), gate_up the one after the norm that
// follows o_proj, down the one after swiglu_forward, lm_head the ones after gather_rows (or the
// head's loss); backward, down after swiglu_forward (h recomputed), gate_up after swiglu_backward,
// lm_head after cross_entropy, and q/k/v after attention_backward where o_proj comes before it.
// The shape must then match the role's, else the role is "gemm <in>x<out>" (a call this order
// does not know).
struct LlamaGemmDims {
  std::int64_t hidden = 0;
  std::int64_t q_dim = 0;
  std::int64_t kv_dim = 0;
  std::int64_t intermediate = 0;
  std::int64_t vocab = 0;
};
GemmClassifier llama_gemm_classifier(const LlamaGemmDims& dims);

class ProfilingBackend final : public Backend {
 public:
  // `classify` may be empty: GEMM calls then have no role.
  explicit ProfilingBackend(std::unique_ptr<Backend> inner, GemmClassifier classify = {});
  ~ProfilingBackend() override;

  Backend& inner() { return *inner_; }
  // Starts recording: a fresh profile and timeline; the ops issued from here on are timed.
  void start();
  // Stops recording and returns the profile (waits until the last recorded op has run).
  OpProfile stop();
  bool recording() const { return recording_; }

  std::string_view name() const override { return inner_->name(); }
  DeviceMemory& memory() override { return inner_->memory(); }
  DType activation_dtype() const override { return inner_->activation_dtype(); }
  PeakFlops measure_peak_flops() override { return inner_->measure_peak_flops(); }
  DeviceDescription describe() override { return inner_->describe(); }
  std::string select_attention(int n_heads, int n_kv_heads, int head_dim) override {
    return inner_->select_attention(n_heads, n_kv_heads, head_dim);
  }
  std::int64_t memory_capacity(int ranks_on_host) override { return inner_->memory_capacity(ranks_on_host); }
  std::int64_t allocator_peak_bytes() override { return inner_->allocator_peak_bytes(); }

  ConstView weights(const float* unit, std::int64_t count) override;
  void release_weights(const float* unit) override;
  void keep_weight_copies(bool keep) override;
  void weights_changed() override;
  void forget_weight_copies() override;
  void set_per_sequence_decode(bool on) override;
  ConstView upload(std::span<const std::int32_t> host, Buffer& staging) override;
  ConstView upload(std::span<const float> host, Buffer& staging) override;
  void download(ConstView source, std::span<float> host) override;
  void copy(ConstView source, View target) override;
  void zero(View target) override;
  void add(ConstView x, View y) override;
  void gather_rows(ConstView source, ConstView rows, std::int64_t width, View target) override;
  void scatter_rows(ConstView source, ConstView rows, std::int64_t width, View target) override;

  void prepare_microbatch(const AttentionShape& shape) override;
  std::int64_t head_chunk_rows(std::int64_t vocab) const override { return inner_->head_chunk_rows(vocab); }
  void resolve_loss(LossSums& sums) override;

  double sum_of_squares(ConstView x) override;
  void adamw_step(std::span<const AdamWSegment> segments, const kernels::AdamWParams& params) override;
  void synchronize() override { inner_->synchronize(); }
  void* native_stream() const override { return inner_->native_stream(); }
  std::unique_ptr<OpTimeline> make_timeline() override { return inner_->make_timeline(); }

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
  void attention_decode_batch(const DecodeAttentionShape& shape, ConstView q, ConstView k_new, ConstView v_new,
                              std::span<const View> k_caches, std::span<const View> v_caches, View out) override;
  void swiglu_forward(ConstView gate_up, View h, std::int64_t rows, std::int64_t width) override;
  void swiglu_backward(ConstView dh, ConstView gate_up, View dgate_up, std::int64_t rows, std::int64_t width) override;
  void embedding_forward(ConstView ids, ConstView table, View out, std::int64_t tokens, std::int64_t dim) override;
  void embedding_backward(ConstView ids, ConstView dout, View dtable, std::int64_t tokens, std::int64_t dim) override;
  void cross_entropy(ConstView logits, ConstView targets, ConstView weights, std::int64_t rows, std::int64_t vocab,
                     View dlogits, View nll, LossSums& sums) override;
  void scale(View x, double alpha) override;
  void row_entropy(ConstView logits, std::int64_t rows, std::int64_t vocab, View out) override;
  void policy_coefficients(ConstView nll, ConstView old_logp, ConstView advantages, ConstView ref_logp,
                           ConstView weights, ConstView entropy, std::int64_t rows,
                           const kernels::PolicyLossParams& params, View coef, kernels::PolicyLossSums& sums) override;
  void resolve_policy(kernels::PolicyLossSums& sums) override;

 private:
  // Runs `op` (a call on the inner backend) between two marks while recording, charging the call
  // and `cost` to (name, role); returns what `op` returns.
  template <typename Op>
  decltype(auto) timed(std::string_view name, std::string_view role, OpCost cost, Op&& op);
  // The classifier's role for a GEMM call ("" without a classifier or while not recording).
  std::string gemm_role(std::string_view op, std::int64_t rows, std::int64_t in, std::int64_t out);

  std::unique_ptr<Backend> inner_;
  GemmClassifier classify_;
  std::unique_ptr<OpTimeline> timeline_;
  bool recording_ = false;
  struct Pending {
    std::size_t category;
    std::size_t begin;
    std::size_t end;
  };
  std::vector<Pending> pending_;
  std::vector<OpRecord> history_;
  OpProfile profile_;
  // The inner backend's compute copies as WeightCopies keeps them (the same rules, no storage):
  // whether a weights() call makes a copy or hands one out again.
  struct NoStorage {};
  WeightCopies<NoStorage> copies_;
};

}  // namespace odc::backend
