// CudaBackend: the model's compute ops, each mapped onto the CUDA kernels' host APIs
// (kernels/cuda_*.h) on the backend's stream, after checking its views' device and dtype.
#include <algorithm>

#include "cuda_backend_impl.h"
#include "odc/kernels/cuda_attention.h"
#include "odc/kernels/cuda_attention_cache.h"
#include "odc/kernels/cuda_backend_ops.h"
#include "odc/kernels/cuda_cross_entropy.h"
#include "odc/kernels/cuda_ops.h"

namespace odc::backend {

namespace cu = kernels::cuda;

namespace {

// Empty optional views become null pointers (the kernels' "not wanted").
const std::uint16_t* bf16_opt(ConstView v, const char* what) { return v.empty() ? nullptr : bf16_in(v, what); }
std::uint16_t* bf16_opt(View v, const char* what) { return v.empty() ? nullptr : bf16_out(v, what); }
float* f32_opt(View v, const char* what) { return v.empty() ? nullptr : f32_out(v, what); }

// The microbatch's plan when it was built for this shape (the model's layers all share one), else
// null: the per-call kernels then build their own.
const cu::AttentionPlan* plan_for(const cu::AttentionPlan& plan, const cu::CudaAttentionShape& shape) {
  if (!plan.built()) return nullptr;
  const auto& p = plan.shape();
  const bool same = p.num_seqs == shape.num_seqs && p.tokens == shape.tokens && p.n_heads == shape.n_heads &&
                    p.n_kv_heads == shape.n_kv_heads && p.head_dim == shape.head_dim &&
                    std::equal(p.cu_seqlens, p.cu_seqlens + p.num_seqs + 1, shape.cu_seqlens);
  const bool same_keys = (p.cu_seqlens_k == nullptr) == (shape.cu_seqlens_k == nullptr) &&
                         (p.cu_seqlens_k == nullptr ||
                          (p.key_tokens == shape.key_tokens &&
                           std::equal(p.cu_seqlens_k, p.cu_seqlens_k + p.num_seqs + 1, shape.cu_seqlens_k)));
  return same && same_keys ? &plan : nullptr;
}

}  // namespace

cu::CudaAttentionShape attention_shape(const AttentionShape& s) {
  ODC_CHECK(s.tokens == 0 || static_cast<int>(s.host_cu_seqlens.size()) == s.num_seqs + 1,
            "the CUDA attention needs the host cu_seqlens ({} sequences, {} bounds given)", s.num_seqs,
            s.host_cu_seqlens.size());
  cu::CudaAttentionShape shape;
  shape.cu_seqlens = s.host_cu_seqlens.data();
  shape.num_seqs = s.num_seqs;
  shape.tokens = s.tokens;
  shape.n_heads = s.n_heads;
  shape.n_kv_heads = s.n_kv_heads;
  shape.head_dim = s.head_dim;
  if (!s.cu_seqlens_k.empty() || !s.host_cu_seqlens_k.empty()) {  // key segments: scheduled from the host bounds
    ODC_CHECK(static_cast<int>(s.host_cu_seqlens_k.size()) == s.num_seqs + 1,
              "the CUDA attention with key segments needs the host cu_seqlens_k ({} sequences, {} bounds given)",
              s.num_seqs, s.host_cu_seqlens_k.size());
    shape.cu_seqlens_k = s.host_cu_seqlens_k.data();
    shape.key_tokens = s.key_tokens;
  }
  return shape;
}

void CudaBackend::rmsnorm_forward(ConstView x, ConstView weight, View y, View rstd, std::int64_t rows,
                                  std::int64_t dim, double eps) {
  cu::rmsnorm_forward(bf16_in(x, "rmsnorm_forward"), bf16_in(weight, "rmsnorm_forward"), bf16_out(y, "rmsnorm_forward"),
                      f32_out(rstd, "rmsnorm_forward"), rows, dim, eps, impl_->s());
}

void CudaBackend::rmsnorm_backward(ConstView dy, ConstView x, ConstView weight, ConstView rstd, View dx, View dweight,
                                   std::int64_t rows, std::int64_t dim, bool dx_accumulate) {
  cu::rmsnorm_backward(bf16_in(dy, "rmsnorm_backward"), bf16_in(x, "rmsnorm_backward"),
                       bf16_in(weight, "rmsnorm_backward"), f32_in(rstd, "rmsnorm_backward"),
                       bf16_out(dx, "rmsnorm_backward"), f32_out(dweight, "rmsnorm_backward"), rows, dim, dx_accumulate,
                       impl_->allocator, impl_->s());
}

void CudaBackend::linear_forward(ConstView x, ConstView weight, ConstView bias, View y, std::int64_t rows,
                                 std::int64_t in, std::int64_t out) {
  cu::linear_forward(impl_->blas, bf16_in(x, "linear_forward"), bf16_in(weight, "linear_forward"),
                     bf16_opt(bias, "linear_forward"), bf16_out(y, "linear_forward"), rows, in, out, impl_->s());
}

void CudaBackend::linear_forward_add(ConstView x, ConstView weight, View y, std::int64_t rows, std::int64_t in,
                                     std::int64_t out) {
  // y[rows, out] += x[rows, in] W[out, in]^T: beta = 1 onto the bf16 residual stream.
  cu::gemm(impl_->blas, false, true, rows, out, in, 1.0f, bf16_in(x, "linear_forward_add"), in,
           bf16_in(weight, "linear_forward_add"), in, 1.0f, bf16_out(y, "linear_forward_add"), out, cu::GemmOut::bf16,
           impl_->s());
}

void CudaBackend::linear_forward_residual(ConstView x, ConstView weight, ConstView residual, View y, std::int64_t rows,
                                          std::int64_t in, std::int64_t out) {
  cu::linear_forward_residual(impl_->blas, bf16_in(x, "linear_forward_residual"),
                              bf16_in(weight, "linear_forward_residual"), bf16_in(residual, "linear_forward_residual"),
                              bf16_out(y, "linear_forward_residual"), rows, in, out, impl_->s());
}

void CudaBackend::linear_backward(ConstView dy, ConstView x, ConstView weight, View dx, View dweight, View dbias,
                                  std::int64_t rows, std::int64_t in, std::int64_t out, bool dx_accumulate) {
  cu::linear_backward(impl_->blas, bf16_in(dy, "linear_backward"), bf16_in(x, "linear_backward"),
                      bf16_in(weight, "linear_backward"), bf16_opt(dx, "linear_backward"),
                      f32_opt(dweight, "linear_backward"), f32_opt(dbias, "linear_backward"), rows, in, out,
                      dx_accumulate, impl_->allocator, impl_->s());
}

void CudaBackend::rope_tables(ConstView positions, std::int64_t tokens, const std::vector<double>& inv_freq, View cos,
                              View sin) {
  const auto half = static_cast<std::int64_t>(inv_freq.size());
  ODC_CHECK(cos.count >= tokens * half && sin.count >= tokens * half, "rope_tables: {} x {} entries into {} and {}",
            tokens, half, cos.count, sin.count);
  // The frequencies are the model's (the same every microbatch): uploaded when they change.
  if (impl_->inv_freq_host != inv_freq) {
    const View device = impl_->inv_freq.get(half);
    if (half > 0) cu::copy_to_device_async(device.data, inv_freq.data(), inv_freq.size() * sizeof(double), impl_->s());
    impl_->inv_freq_host = inv_freq;
  }
  cu::rope_tables(i32_in(positions, "rope_tables"), tokens, static_cast<const double*>(impl_->inv_freq.get(half).data),
                  half, f32_out(cos, "rope_tables"), f32_out(sin, "rope_tables"), impl_->s());
}

void CudaBackend::rope_forward(View x, ConstView cos, ConstView sin, std::int64_t tokens, int heads, int head_dim) {
  cu::rope_forward(bf16_out(x, "rope_forward"), f32_in(cos, "rope_forward"), f32_in(sin, "rope_forward"), tokens, heads,
                   head_dim, impl_->s());
}

void CudaBackend::rope_backward(View dx, ConstView cos, ConstView sin, std::int64_t tokens, int heads, int head_dim) {
  cu::rope_backward(bf16_out(dx, "rope_backward"), f32_in(cos, "rope_backward"), f32_in(sin, "rope_backward"), tokens,
                    heads, head_dim, impl_->s());
}

void CudaBackend::attention_forward(const AttentionShape& shape, ConstView q, ConstView k, ConstView v, View out,
                                    View lse) {
  const cu::CudaAttentionShape s = attention_shape(shape);
  const auto* q_ = bf16_in(q, "attention_forward");
  const auto* k_ = bf16_in(k, "attention_forward");
  const auto* v_ = bf16_in(v, "attention_forward");
  auto* o_ = bf16_out(out, "attention_forward");
  float* lse_ = f32_out(lse, "attention_forward");
  if (impl_->use_cudnn(s)) {  // false for key segments (use_cudnn says why)
    try {
      if (impl_->cudnn_attention->forward(s, q_, k_, v_, o_, lse_, impl_->allocator, impl_->s())) return;
      impl_->cudnn_declined();
    } catch (const Error& e) {
      impl_->cudnn_failed(e, "attention forward");  // rethrows under model.attention=cudnn
    }
  }
  if (const cu::AttentionPlan* plan = plan_for(impl_->attention_plan, s)) {
    cu::attention_forward(*plan, q_, k_, v_, o_, lse_, impl_->s());
  } else {
    cu::attention_forward(s, q_, k_, v_, o_, lse_, impl_->allocator, impl_->s());
  }
}

void CudaBackend::attention_backward(const AttentionShape& shape, ConstView q, ConstView k, ConstView v, ConstView out,
                                     ConstView lse, ConstView dout, View dq, View dk, View dv) {
  const cu::CudaAttentionShape s = attention_shape(shape);
  const auto* q_ = bf16_in(q, "attention_backward");
  const auto* k_ = bf16_in(k, "attention_backward");
  const auto* v_ = bf16_in(v, "attention_backward");
  const auto* o_ = bf16_in(out, "attention_backward");
  const float* lse_ = f32_in(lse, "attention_backward");
  const auto* do_ = bf16_in(dout, "attention_backward");
  auto* dq_ = bf16_out(dq, "attention_backward");
  auto* dk_ = bf16_out(dk, "attention_backward");
  auto* dv_ = bf16_out(dv, "attention_backward");
  if (impl_->use_cudnn(s)) {  // lse has the same layout from either forward
    try {
      if (impl_->cudnn_attention->backward(s, q_, k_, v_, o_, lse_, do_, dq_, dk_, dv_, impl_->allocator,
                                           impl_->s())) {
        return;
      }
      impl_->cudnn_declined();
    } catch (const Error& e) {
      impl_->cudnn_failed(e, "attention backward");
    }
  }
  if (const cu::AttentionPlan* plan = plan_for(impl_->attention_plan, s)) {
    cu::attention_backward(*plan, q_, k_, v_, o_, lse_, do_, dq_, dk_, dv_, impl_->allocator, impl_->s());
  } else {
    cu::attention_backward(s, q_, k_, v_, o_, lse_, do_, dq_, dk_, dv_, impl_->allocator, impl_->s());
  }
}

void CudaBackend::attention_cached(const CachedAttentionShape& shape, ConstView q, ConstView k_cache,
                                   ConstView v_cache, View out) {
  const std::int64_t keys = shape.past + shape.queries;
  const std::int64_t q_elems = shape.queries * shape.n_heads * shape.head_dim;
  const std::int64_t kv_elems = keys * shape.n_kv_heads * shape.head_dim;
  ODC_CHECK(q.count >= q_elems && out.count >= q_elems && k_cache.count >= kv_elems && v_cache.count >= kv_elems,
            "attention_cached: {} queries after {} cached rows need {} query and {} cache elements, got q {}, out {}, "
            "k {}, v {}", shape.queries, shape.past, q_elems, kv_elems, q.count, out.count, k_cache.count,
            v_cache.count);
  cu::attention_cached_forward({shape.queries, shape.past, shape.n_heads, shape.n_kv_heads, shape.head_dim},
                               bf16_in(q, "attention_cached"), bf16_in(k_cache, "attention_cached"),
                               bf16_in(v_cache, "attention_cached"), bf16_out(out, "attention_cached"),
                               impl_->allocator, impl_->s());
}

void CudaBackend::attention_decode_batch(const DecodeAttentionShape& shape, ConstView q, ConstView k_new,
                                         ConstView v_new, std::span<const View> k_caches,
                                         std::span<const View> v_caches, View out) {
  if (per_sequence_decode()) {
    Backend::attention_decode_batch(shape, q, k_new, v_new, k_caches, v_caches, out);
    return;
  }
  check_decode_batch(shape, q, k_new, v_new, k_caches, v_caches, out);
  const auto count = static_cast<std::int64_t>(shape.past.size());
  if (count == 0) return;
  auto& entries = impl_->decode_entries;
  entries.clear();
  for (std::size_t i = 0; i < shape.past.size(); ++i) {
    entries.push_back({bf16_out(k_caches[i], "attention_decode_batch"), bf16_out(v_caches[i], "attention_decode_batch"),
                       shape.past[i], 0});
  }
  const std::int64_t scratch = cu::decode_batch_scratch(entries, shape.n_heads);
  const std::size_t bytes = entries.size() * sizeof(cu::DecodeBatchEntry);
  const View table = impl_->upload(entries.data(), bytes, static_cast<std::int64_t>(bytes / 4), impl_->decode_table);
  cu::attention_decode_batch({count, shape.n_heads, shape.n_kv_heads, shape.head_dim},
                             static_cast<const cu::DecodeBatchEntry*>(table.data), scratch,
                             bf16_in(q, "attention_decode_batch"), bf16_in(k_new, "attention_decode_batch"),
                             bf16_in(v_new, "attention_decode_batch"), bf16_out(out, "attention_decode_batch"),
                             impl_->allocator, impl_->s());
}

void CudaBackend::swiglu_forward(ConstView gate_up, View h, std::int64_t rows, std::int64_t width) {
  const auto* gu = bf16_in(gate_up, "swiglu_forward");
  cu::swiglu_forward(gu, gu + width, 2 * width, bf16_out(h, "swiglu_forward"), rows, width, impl_->s());
}

void CudaBackend::swiglu_backward(ConstView dh, ConstView gate_up, View dgate_up, std::int64_t rows, std::int64_t width) {
  const auto* gu = bf16_in(gate_up, "swiglu_backward");
  auto* dgu = bf16_out(dgate_up, "swiglu_backward");
  cu::swiglu_backward(bf16_in(dh, "swiglu_backward"), gu, gu + width, 2 * width, dgu, dgu + width, rows, width,
                      impl_->s());
}

void CudaBackend::embedding_forward(ConstView ids, ConstView table, View out, std::int64_t tokens, std::int64_t dim) {
  cu::embedding_forward(i32_in(ids, "embedding_forward"), bf16_in(table, "embedding_forward"),
                        bf16_out(out, "embedding_forward"), tokens, dim, impl_->s());
}

void CudaBackend::embedding_backward(ConstView ids, ConstView dout, View dtable, std::int64_t tokens, std::int64_t dim) {
  cu::embedding_backward(i32_in(ids, "embedding_backward"), bf16_in(dout, "embedding_backward"),
                         f32_out(dtable, "embedding_backward"), tokens, dim, impl_->s());
}

void CudaBackend::scale(View x, double alpha) {
  if (x.empty() || x.count == 0) return;
  cu::scale_bf16(bf16_out(x, "scale"), x.count, static_cast<float>(alpha), impl_->s());
}

void CudaBackend::cross_entropy(ConstView logits, ConstView targets, ConstView weights, std::int64_t rows,
                                std::int64_t vocab, View dlogits, View nll, LossSums& sums) {
  (void)sums;  // the chunk's sums stay on the device until resolve_loss
  if (rows == 0) return;
  float* nll_rows = nll.empty() ? static_cast<float*>(impl_->chunk_nll.get(rows).data) : f32_out(nll, "cross_entropy");
  ODC_CHECK(nll.empty() || nll.count >= rows, "cross_entropy: {} rows into an nll view of {}", rows, nll.count);
  double* row_loss = static_cast<double*>(impl_->row_loss.get(rows).data);
  cu::cross_entropy_forward_backward(bf16_in(logits, "cross_entropy"), i32_in(targets, "cross_entropy"),
                                     f32_in(weights, "cross_entropy"), rows, vocab, bf16_opt(dlogits, "cross_entropy"),
                                     nll_rows, row_loss, nullptr, impl_->s());
  // Fixed-order sums into the pending pair (the model validated the targets on the host).
  double* pending = static_cast<double*>(impl_->loss_sums.get(2).data);
  cu::sum_f64(row_loss, rows, pending, true, impl_->s());
  cu::sum_f32(nll_rows, rows, pending + 1, true, impl_->s());
}

}  // namespace odc::backend
