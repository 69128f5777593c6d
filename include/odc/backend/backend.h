#pragma once
// Backend: every operation the model runs, on one device, chosen when the model is built (CPU
// now: cpu_backend.h; a CUDA backend plugs in here). The model holds its activations in the
// backend's Buffers and hands the backend views; it never touches a pointer's memory itself, so
// it runs unchanged wherever its backend runs. Each op has the semantics of the kernel family of
// the same name (odc/kernels/*.h): row-major, a linear layer's weight is [out, in], gradients of
// weights are *added* into the given views.
//
// Element types: weights and weight gradients are fp32 (the comm's unit buffers); activations
// are in activation_dtype(); per-row statistics (RMSNorm rstd, attention log-sum-exp, per-token
// losses) and RoPE tables are fp32; token ids, positions, targets and row indices are int32.
// Optional arguments are empty views.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "odc/backend/buffer.h"
#include "odc/kernels/adamw.h"
#include "odc/kernels/policy_loss.h"

namespace odc::backend {

// Packed causal attention (kernels/attention.h): sequence s owns rows [cu_seqlens[s], cu_seqlens[s+1]).
// Key segments (context parallelism; kernels/attention_segments.h): with cu_seqlens_k given,
// sequence s's queries attend to rows [cu_seqlens_k[s], cu_seqlens_k[s+1]) of separate k/v
// buffers of key_tokens rows (dk/dv likewise), the causal diagonal aligned at the end of both;
// left empty, the keys are the query rows, as before.
struct AttentionShape {
  ConstView cu_seqlens;  // int32, num_seqs + 1 entries
  // The same bounds on the host (the batch's own vector): a GPU backend schedules the attention's
  // tiles from them without reading device memory back. Valid for the microbatch.
  std::span<const std::int32_t> host_cu_seqlens;
  int num_seqs = 0;
  std::int64_t tokens = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  ConstView cu_seqlens_k{};  // int32, num_seqs + 1 entries, or empty: no key segments
  std::span<const std::int32_t> host_cu_seqlens_k{};  // the same on the host (as host_cu_seqlens)
  std::int64_t key_tokens = 0;                      // == cu_seqlens_k[num_seqs]
};

// Incremental decoding (kernels/attention_cache.h): `queries` new rows of one sequence at
// positions [past, past + queries), attending to its key/value cache rows [0, past + queries).
struct CachedAttentionShape {
  std::int64_t queries = 0;
  std::int64_t past = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
};

// Batched decoding (Backend::attention_decode_batch): one new row for each of past.size()
// sequences, sequence i's at position past[i], each with its own key/value caches.
struct DecodeAttentionShape {
  std::span<const std::int64_t> past;  // per sequence: its cached rows before the new one
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
};

// The checks every attention_decode_batch makes: as many caches as sequences, the query, new
// key/value and output views long enough for them, each cache holding its row past[i]; odc::Error
// naming the sequence otherwise.
void check_decode_batch(const DecodeAttentionShape& shape, ConstView q, ConstView k_new, ConstView v_new,
                        std::span<const View> k_caches, std::span<const View> v_caches, ConstView out);

// Points in a backend's queue of ops, for timing ops where they run (Backend::make_timeline;
// backend/op_profiler.h). Marks are placed in issue order; reading a time waits for its marks.
class OpTimeline {
 public:
  virtual ~OpTimeline() = default;
  // A point after every op issued so far; returns its index (0, 1, ... since the last reset).
  virtual std::size_t mark() = 0;
  // Seconds of the backend's time between marks a <= b (waits until b is reached).
  virtual double seconds(std::size_t a, std::size_t b) = 0;
  // Forgets every mark (its storage is reused).
  virtual void reset() = 0;
};

// Running sums of a loss over row chunks (cross_entropy adds each chunk's rows in order).
struct LossSums {
  double weighted = 0.0;  // sum_r weight[r] * nll[r]
  double nll = 0.0;       // sum_r nll[r] (rows with weight 0 count 0)
};

// One contiguous fp32 range of master weights with its gradient and AdamW moments, all in the
// backend's memory (the optimizer's view of a shard; ShardLayout::decay_segments).
struct AdamWSegment {
  View param;
  ConstView grad;
  View exp_avg;
  View exp_avg_sq;
  bool weight_decay = true;  // false: no decay on this range (norm weights, biases, padding)
};

// The denominators of a run's utilization figures (Backend::measure_peak_flops), per rank.
struct PeakFlops {
  // The device's peak FLOP/s: the MFU denominator. CPU: one core's measured FMA-loop peak times
  // the compute threads (core/cpu_features.h); GPU: the best measured rate of a large bf16 GEMM.
  double device = 0.0;
  // The measured rate of a model-shaped GEMM through the path the linear layers take: the
  // denominator of the GEMM fraction (how close the run comes to what its GEMMs can do).
  double gemm = 0.0;
  std::string source;  // how `device` was found, for the start-up log
};

// What the device is and which path its GEMMs take, for the start-up log (Backend::describe).
struct DeviceDescription {
  // e.g. "cpu: AMD EPYC 7763 (family 25 model 1), ISA avx2; GEMM oneDNN 2.6.3 (avx2, gemm:jit)".
  std::string text;
  // Non-empty: the GEMM path falls short of the device (GEMMs on an ISA below the CPU's); the
  // trainer logs it as a warning.
  std::string warning;
};

// What a backend of `kind` computing in `compute` allocates per the memory model
// (train/plan/memory_plan.h), known without creating it (a plan for a GPU is made on any machine):
// its activation dtype, the bytes per element of the copy weights() makes (0: none, the fp32 unit
// itself is computed with) and the rows of logits its head computes per chunk.
DType activation_dtype_of(DeviceKind kind);
std::int64_t weight_copy_element_bytes(DeviceKind kind, DType compute);
std::int64_t head_chunk_rows_of(DeviceKind kind, std::int64_t vocab);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  virtual DeviceMemory& memory() = 0;
  Device device() { return memory().device(); }
  virtual DType activation_dtype() const = 0;
  // Measures the device's peak and its GEMM rate (PeakFlops; a fraction of a second).
  virtual PeakFlops measure_peak_flops() = 0;
  // Cheap (nothing is timed). Default: the backend's name.
  virtual DeviceDescription describe() { return {std::string(name()), {}}; }
  // Settles which attention kernels serve heads of this shape (model.attention, where a backend
  // has several) and says which and why, for the start-up log; odc::Error where the requested
  // kernels cannot serve them. Default: the backend's only kernels.
  virtual std::string select_attention(int n_heads, int n_kv_heads, int head_dim) {
    (void)n_heads, (void)n_kv_heads, (void)head_dim;
    return std::string(name()) + " attention kernels";
  }
  // This rank's share of the memory it computes in, when `ranks_on_host` ranks run on this host
  // (the memory plan's budget without train.memory_budget_gib; 0 when unknown). Default: the
  // host's available memory over its ranks; a GPU backend: its device's memory over the ranks
  // that share the device.
  virtual std::int64_t memory_capacity(int ranks_on_host);
  // The most bytes this backend's allocator held in live blocks at once since it was created (0:
  // not tracked, as on the CPU, whose allocations the process's resident set shows).
  virtual std::int64_t allocator_peak_bytes() { return 0; }

  // ---- views and data movement ----
  // The precision boundary. `unit` is an fp32 unit buffer the comm handed out (ParamSource), in
  // this backend's memory; weights() returns the view the ops compute with: the buffer itself
  // where the compute dtype is fp32, else a copy rounded to it (made at the first weights() call
  // for `unit` after its release_weights(); later calls return the same copy). The view is valid
  // until release_weights(unit), which the model calls where it releases the unit.
  virtual ConstView weights(const float* unit, std::int64_t count) { return {unit, DType::f32, device(), count}; }
  // Nothing happens for a unit without a live copy.
  virtual void release_weights(const float* unit) { (void)unit; }
  // Kept copies (backend/weight_copies.h): with `keep`, a released copy stays with its unit and
  // the next weights() of that unit reuses it until weights_changed(). For a comm that hands out
  // the units themselves (one rank: the masters), whose contents change only at the optimizer
  // step: the copies are then made once per step, not at every acquire. Defaults: nothing to keep.
  virtual void keep_weight_copies(bool keep) { (void)keep; }
  virtual void weights_changed() {}
  // The kept copies' units are gone or name other weights now (a WeightSnapshot made or freed):
  // every kept copy is dropped, its storage left for the next units' copies, so copies keyed by a
  // freed snapshot's pointers never pile up beside the masters'. Default: nothing kept.
  virtual void forget_weight_copies() {}
  // The fp32 gradient accumulator of a unit (GradSink), in this backend's memory: weight
  // gradients are always added in fp32, whatever the compute dtype.
  View gradients(float* unit, std::int64_t count) { return {unit, DType::f32, device(), count}; }
  // Host data the ops read (ids, positions, loss weights): a view of it on the device — the host
  // memory itself where the device is the host, else a copy in `staging`. Valid while both live.
  virtual ConstView upload(std::span<const std::int32_t> host, Buffer& staging) = 0;
  virtual ConstView upload(std::span<const float> host, Buffer& staging) = 0;
  // Copies fp32 (or activation) elements back to the host as fp32.
  virtual void download(ConstView source, std::span<float> host) = 0;
  virtual void copy(ConstView source, View target) = 0;  // same dtype and count
  virtual void zero(View target) = 0;
  // y += x, element-wise, same dtype and count (bf16: the sum in fp32, rounded once): the copies of
  // a split sequence's key gradients summed on the member holding those keys (context_split.h).
  virtual void add(ConstView x, View y) = 0;
  // target[i, :] = source[rows[i], :] for i < rows.count; rows of `width` elements.
  virtual void gather_rows(ConstView source, ConstView rows, std::int64_t width, View target) = 0;
  // target[rows[i], :] = source[i, :].
  virtual void scatter_rows(ConstView source, ConstView rows, std::int64_t width, View target) = 0;

  // ---- per-microbatch hooks (defaults: nothing to do) ----
  // Called once per microbatch before its first op, with the attention shape every layer will
  // use: a GPU backend builds its attention work tables here once instead of in every call.
  virtual void prepare_microbatch(const AttentionShape& shape) { (void)shape; }
  // Rows of logits the model's head computes per chunk for this vocabulary (the CPU default
  // bounds a chunk's logits to ~16 MiB; a GPU backend may prefer larger chunks).
  virtual std::int64_t head_chunk_rows(std::int64_t vocab) const;
  // Completes the LossSums that cross_entropy calls since the last resolve_loss added into: a
  // backend whose sums live on the device adds them into `sums` here (one device->host read per
  // head instead of one per chunk). The default adds in cross_entropy itself and does nothing.
  virtual void resolve_loss(LossSums& sums) { (void)sums; }

  // ---- optimizer-side ops on fp32 state in this backend's memory (defaults: the CPU kernels) ----
  // Sum of squares of fp32 elements, accumulated in double in a fixed order (the same result run
  // to run: the global gradient norm).
  virtual double sum_of_squares(ConstView x);
  // AdamW (kernels/adamw.h) over every segment; `params.weight_decay` applies to the segments
  // with weight_decay, none to the others.
  virtual void adamw_step(std::span<const AdamWSegment> segments, const kernels::AdamWParams& params);
  // Waits until every op issued so far has completed (host timing; nothing on the CPU).
  virtual void synchronize() {}
  // The queue the backend's ops run on, in the device API's own type (a cudaStream_t for CUDA),
  // for comms and transports that order their own work against the model's; null where ops run
  // on the calling thread (the CPU backends). Valid for the backend's lifetime.
  virtual void* native_stream() const { return nullptr; }
  // A timeline of this backend's queue (OpTimeline). Default: the host's steady clock after
  // synchronize(), for backends whose ops have finished when they return.
  virtual std::unique_ptr<OpTimeline> make_timeline();

  // ---- ops (kernels/*.h for the math) ----
  virtual void rmsnorm_forward(ConstView x, ConstView weight, View y, View rstd, std::int64_t rows, std::int64_t dim,
                               double eps) = 0;
  virtual void rmsnorm_backward(ConstView dy, ConstView x, ConstView weight, ConstView rstd, View dx, View dweight,
                                std::int64_t rows, std::int64_t dim, bool dx_accumulate) = 0;
  // y = x W^T (+ bias).
  virtual void linear_forward(ConstView x, ConstView weight, ConstView bias, View y, std::int64_t rows,
                              std::int64_t in, std::int64_t out) = 0;
  // y += x W^T: the residual connections (attention and MLP outputs added into the stream).
  virtual void linear_forward_add(ConstView x, ConstView weight, View y, std::int64_t rows, std::int64_t in,
                                  std::int64_t out) = 0;
  // y = residual + x W^T (y may be residual): the residual connection into a new stream buffer.
  // Default: copy, then linear_forward_add (the same bits); a GPU backend adds in the GEMM's
  // epilogue, reading the residual instead of copying it first.
  virtual void linear_forward_residual(ConstView x, ConstView weight, ConstView residual, View y, std::int64_t rows,
                                       std::int64_t in, std::int64_t out);
  virtual void linear_backward(ConstView dy, ConstView x, ConstView weight, View dx, View dweight, View dbias,
                               std::int64_t rows, std::int64_t in, std::int64_t out, bool dx_accumulate) = 0;
  // cos/sin [tokens, head_dim/2] for the positions (int32), from rope_inv_freq (kernels/rope_scaling.h).
  virtual void rope_tables(ConstView positions, std::int64_t tokens, const std::vector<double>& inv_freq, View cos,
                           View sin) = 0;
  virtual void rope_forward(View x, ConstView cos, ConstView sin, std::int64_t tokens, int heads, int head_dim) = 0;
  virtual void rope_backward(View dx, ConstView cos, ConstView sin, std::int64_t tokens, int heads, int head_dim) = 0;
  virtual void attention_forward(const AttentionShape& shape, ConstView q, ConstView k, ConstView v, View out,
                                 View lse) = 0;
  virtual void attention_backward(const AttentionShape& shape, ConstView q, ConstView k, ConstView v, ConstView out,
                                  ConstView lse, ConstView dout, View dq, View dk, View dv) = 0;
  // Inference only (no log-sum-exp, no backward): q and out [queries, n_heads * head_dim]; the
  // caches [>= past + queries, n_kv_heads * head_dim] in activation_dtype(), the new rows'
  // post-RoPE keys and values already written at rows [past, past + queries).
  virtual void attention_cached(const CachedAttentionShape& shape, ConstView q, ConstView k_cache, ConstView v_cache,
                                View out) = 0;
  // Batched decoding, inference only: writes sequence i's new post-RoPE key and value rows (row i
  // of k_new, v_new: [sequences, n_kv_heads * head_dim]) at row past[i] of k_caches[i] and
  // v_caches[i] (each [>= past[i] + 1, n_kv_heads * head_dim], activation_dtype()), then attends
  // its query row (row i of q, out: [sequences, n_heads * head_dim]) to its cache rows
  // [0, past[i]]. Default: per sequence, the two copies and attention_cached (a launch each); a
  // backend may serve every sequence at once (CPU: one parallel region; CUDA: one launch), with
  // results bitwise those of the default, unless per_sequence_decode() asks for the default.
  virtual void attention_decode_batch(const DecodeAttentionShape& shape, ConstView q, ConstView k_new, ConstView v_new,
                                      std::span<const View> k_caches, std::span<const View> v_caches, View out);
  // Batched decoding through the per-sequence default even where the backend has its own: the
  // baseline the rollout benchmark (bench/rollout_throughput.cpp) runs beside the batched path.
  // Virtual so that a wrapping backend passes it on to the backend it wraps.
  virtual void set_per_sequence_decode(bool on) { per_sequence_decode_ = on; }
  bool per_sequence_decode() const { return per_sequence_decode_; }
  // SwiGLU over the fused gate/up projection: gate_up [rows, 2 * width] holds each row's gate,
  // then its up; h [rows, width] = silu(gate) * up. The backward writes dgate_up in gate_up's
  // layout (each row's d gate, then d up), from dh [rows, width]; it must not alias the inputs.
  virtual void swiglu_forward(ConstView gate_up, View h, std::int64_t rows, std::int64_t width) = 0;
  virtual void swiglu_backward(ConstView dh, ConstView gate_up, View dgate_up, std::int64_t rows,
                               std::int64_t width) = 0;
  virtual void embedding_forward(ConstView ids, ConstView table, View out, std::int64_t tokens, std::int64_t dim) = 0;
  virtual void embedding_backward(ConstView ids, ConstView dout, View dtable, std::int64_t tokens, std::int64_t dim) = 0;
  // Weighted cross-entropy of `rows` logits rows (targets int32, weights fp32); `dlogits` (may be
  // `logits` itself, or empty) receives weight * (softmax - onehot), `nll` each row's loss; the
  // chunk's sums are added into `sums`.
  virtual void cross_entropy(ConstView logits, ConstView targets, ConstView weights, std::int64_t rows,
                             std::int64_t vocab, View dlogits, View nll, LossSums& sums) = 0;
  // x *= alpha, in place, in x's dtype (the policy head's logits / temperature). Default: host f32.
  virtual void scale(View x, double alpha);
  // The softmax entropy of each of `rows` logits rows into `out` (fp32, this backend's memory): a
  // metric of the policy objective (kernels/policy_loss.h). Default: on the host (a device
  // backend's rows are downloaded, the entropies uploaded).
  virtual void row_entropy(ConstView logits, std::int64_t rows, std::int64_t vocab, View out);
  // The clipped policy objective's per-row coefficients (kernels/policy_loss.h) of `rows` head
  // rows, each divided by params.temperature (the gradient by the raw logits, the head having
  // scaled them by 1/T): from `nll` (cross_entropy's, at that temperature), the rows'
  // sampling-policy log-probabilities, advantages, reference log-probabilities (empty: none) and
  // aggregation weights; `entropy` (empty: none) the rows' entropies, whose sum over the weighted
  // rows goes into the sums' entropy. All fp32 in this backend's memory; `coef` receives `rows`
  // floats. The rows' sums (kernels::PolicyLossSums, nll included) are added into `sums` at once,
  // or, where a backend keeps them in its memory, at the next resolve_policy (one read per head,
  // none per chunk). Default: on the host, as the CPU kernel (downloads and an upload on a device).
  virtual void policy_coefficients(ConstView nll, ConstView old_logp, ConstView advantages, ConstView ref_logp,
                                   ConstView weights, ConstView entropy, std::int64_t rows,
                                   const kernels::PolicyLossParams& params, View coef, kernels::PolicyLossSums& sums);
  // Adds the sums policy_coefficients kept since the last resolve_policy into `sums`. Default: none kept.
  virtual void resolve_policy(kernels::PolicyLossSums& sums) { (void)sums; }

 private:
  bool per_sequence_decode_ = false;
};

}  // namespace odc::backend
