#pragma once
// CpuBackend: the model's ops on the host through the CPU kernels (odc/kernels/*.h,
// src/kernels/cpu). Views alias host memory: uploads are free.
//
// Compute dtype f32 (the default): fp32 everywhere. Compute dtype bf16: the mixed precision of the
// CUDA backend, rounded at the same points (docs/MIXED_PRECISION.md), so that a GPU run can be
// checked against this one far more tightly than against fp32:
//   - weights() hands out a bf16-rounded copy of the fp32 unit, kept until release_weights();
//   - every op output the CUDA kernels store in bf16 (activations and activation gradients) is
//     rounded to bf16 (round to nearest even) once, after an fp32 computation;
//   - what the CUDA path keeps in fp32 stays fp32: RMSNorm rstd, attention lse, RoPE tables,
//     per-row nll, the double loss sums, and the weight gradients (dweight, dbias, embedding
//     dtable), which are fp32 accumulators of fp32-accumulated products of bf16 values.
// Storage choice: activations stay fp32 buffers (activation_dtype() is f32 in both modes) that
// hold bf16-representable values. The GEMMs then remain sgemm on exactly representable inputs,
// whose fp32 accumulation matches the GPU's bf16-in/fp32-accumulate GEMM up to summation order,
// and every op but attention is the fp32 kernel followed by a rounding of its outputs. Attention
// has its own bf16 code (cpu_bf16_attention.cpp) because the GPU rounds inside it: the
// probabilities before the PV product, dS before the dQ/dK products.
#include <memory>
#include <vector>

#include "odc/backend/backend.h"
#include "odc/backend/weight_copies.h"

namespace odc::backend {

class CpuBackend final : public Backend {
 public:
  // `threads`: compute threads for the kernels (oneDNN GEMMs and the OpenMP loops of the other
  // kernels), >= 1. `compute`: DType::f32 or
  // DType::bf16 (model.dtype: float32 | bfloat16); anything else is an odc::Error.
  explicit CpuBackend(int threads = 1, DType compute = DType::f32);

  std::string_view name() const override { return compute_ == DType::bf16 ? "cpu-bf16" : "cpu"; }
  DType compute_dtype() const { return compute_; }
  DeviceMemory& memory() override;
  DType activation_dtype() const override { return activation_dtype_of(DeviceKind::cpu); }
  int threads() const { return threads_; }
  // device: one core's FMA-loop peak (core/cpu_features.h: the widest FMA ISA, registers only)
  // times threads(), the ceiling no kernel passes; gemm: the best of 3 model-shaped sgemms
  // (x[512, 1024] W[2816, 1024]^T, an MLP projection) through the kernels' GEMM with threads()
  // threads. About 0.1 s + 0.2 s; best-of, since other processes only ever make a run slower.
  // MFU against `device` says how much of the cores' arithmetic the training uses, so a slow
  // GEMM path (a GEMM library on a narrower ISA than the CPU's) shows as low MFU, not hides in the
  // denominator; the fraction of `gemm` says how close the run is to its GEMMs' speed.
  PeakFlops measure_peak_flops() override;
  // The CPU (model, family/model, ISA) and the GEMM library, ISA and kernel (kernels::cpu::gemm_info);
  // the warning when the GEMM's ISA is below the CPU's (both known).
  DeviceDescription describe() override;

  // bf16 mode: a bf16-rounded copy of `unit` (the same copy until release_weights(unit); a
  // different count for a live unit is an odc::Error). f32 mode: the unit itself.
  ConstView weights(const float* unit, std::int64_t count) override;
  void release_weights(const float* unit) override;
  void keep_weight_copies(bool keep) override;
  void weights_changed() override;
  void forget_weight_copies() override;
  // Units with a live bf16 copy (0 in f32 mode): for tests of the acquire/release pairing.
  std::size_t live_weight_copies() const { return weight_copies_.live(); }

  ConstView upload(std::span<const std::int32_t> host, Buffer& staging) override;
  ConstView upload(std::span<const float> host, Buffer& staging) override;
  void download(ConstView source, std::span<float> host) override;
  void copy(ConstView source, View target) override;
  void zero(View target) override;
  void add(ConstView x, View y) override;
  void gather_rows(ConstView source, ConstView rows, std::int64_t width, View target) override;
  void scatter_rows(ConstView source, ConstView rows, std::int64_t width, View target) override;

  void rmsnorm_forward(ConstView x, ConstView weight, View y, View rstd, std::int64_t rows, std::int64_t dim,
                       double eps) override;
  void rmsnorm_backward(ConstView dy, ConstView x, ConstView weight, ConstView rstd, View dx, View dweight,
                        std::int64_t rows, std::int64_t dim, bool dx_accumulate) override;
  void linear_forward(ConstView x, ConstView weight, ConstView bias, View y, std::int64_t rows, std::int64_t in,
                      std::int64_t out) override;
  void linear_forward_add(ConstView x, ConstView weight, View y, std::int64_t rows, std::int64_t in,
                          std::int64_t out) override;
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
  // Every sequence in one parallel region (kernels::cpu::attention_decode_batch_forward): bitwise
  // the default's per-sequence copies and attention_cached, in both modes.
  void attention_decode_batch(const DecodeAttentionShape& shape, ConstView q, ConstView k_new, ConstView v_new,
                              std::span<const View> k_caches, std::span<const View> v_caches, View out) override;
  void swiglu_forward(ConstView gate_up, View h, std::int64_t rows, std::int64_t width) override;
  void swiglu_backward(ConstView dh, ConstView gate_up, View dgate_up, std::int64_t rows, std::int64_t width) override;
  void embedding_forward(ConstView ids, ConstView table, View out, std::int64_t tokens, std::int64_t dim) override;
  void embedding_backward(ConstView ids, ConstView dout, View dtable, std::int64_t tokens, std::int64_t dim) override;
  void scale(View x, double alpha) override;  // rounds to bf16 in bf16 mode, as the CUDA path stores bf16
  // From the logits in place (host memory): no copy of the chunk as the download default makes.
  void row_entropy(ConstView logits, std::int64_t rows, std::int64_t vocab, View out) override;
  // The CPU kernel on the views in place.
  void policy_coefficients(ConstView nll, ConstView old_logp, ConstView advantages, ConstView ref_logp,
                           ConstView weights, ConstView entropy, std::int64_t rows,
                           const kernels::PolicyLossParams& params, View coef, kernels::PolicyLossSums& sums) override;
  void cross_entropy(ConstView logits, ConstView targets, ConstView weights, std::int64_t rows, std::int64_t vocab,
                     View dlogits, View nll, LossSums& sums) override;

 private:
  bool rounds() const { return compute_ == DType::bf16; }

  std::unique_ptr<DeviceMemory> memory_;
  int threads_;
  DType compute_;
  struct WeightCopy {
    Buffer buffer;
    std::int64_t count = 0;  // elements of the unit it holds
  };
  WeightCopies<WeightCopy> weight_copies_;  // bf16 mode: unit -> its rounded copy
};

}  // namespace odc::backend
