#include "odc/backend/cpu_backend.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "cpu_bf16_attention.h"
#include "odc/core/cpu_features.h"
#include "odc/core/error.h"
#include "odc/core/peak_cache.h"
#include "odc/kernels/attention.h"
#include "odc/kernels/attention_cache.h"
#include "odc/kernels/cross_entropy.h"
#include "odc/kernels/policy_loss.h"
#include "odc/kernels/embedding.h"
#include "odc/kernels/matmul.h"
#include "odc/kernels/rmsnorm.h"
#include "odc/kernels/rope.h"
#include "odc/kernels/swiglu.h"

namespace odc::backend {

namespace k = kernels::cpu;

namespace {

// Large buffers (activations, the head's chunks) are mapped from the system and unmapped when
// freed, not taken from malloc's heap: glibc raises its mmap threshold after each large free, so
// later buffers of a growing microbatch would come from the heap, whose freed holes stay resident
// (measured: +20% of resident set over what the buffers hold). Mapped pages arrive zero-filled;
// the resident set then follows the live buffers and the memory plan (train/plan/memory_plan.h).
class HostMemory final : public DeviceMemory {
 public:
  static constexpr std::size_t kMapBytes = std::size_t{256} << 10;

  Device device() const override { return Device::cpu(); }
  void* allocate(std::size_t bytes) override {
    if (bytes == 0) return nullptr;
    if (bytes >= kMapBytes) {
      void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) fail("out of host memory mapping {} bytes: {}", bytes, std::strerror(errno));
      return p;
    }
    constexpr std::size_t kAlignment = 64;
    const std::size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    void* p = std::aligned_alloc(kAlignment, rounded);
    if (p == nullptr) fail("out of host memory allocating {} bytes", bytes);
    std::memset(p, 0, rounded);
    return p;
  }
  void deallocate(void* data, std::size_t bytes) noexcept override {
    if (data == nullptr) return;
    if (bytes >= kMapBytes) {
      ::munmap(data, bytes);
    } else {
      std::free(data);
    }
  }
};

// The raw pointer of a view, after checking it is host memory of the element type T.
template <typename T>
DType dtype_for() {
  if constexpr (std::is_same_v<T, float>) return DType::f32;
  return DType::i32;
}
template <typename T>
const T* in(ConstView v) {
  ODC_CHECK(v.device.kind == DeviceKind::cpu, "the CPU backend got a view of device memory");
  ODC_CHECK(v.empty() || v.count == 0 || v.dtype == dtype_for<T>(), "the CPU backend got a {} view for {}",
            dtype_name(v.dtype), dtype_name(dtype_for<T>()));
  return static_cast<const T*>(v.data);
}
template <typename T>
T* out(View v) {
  return const_cast<T*>(in<T>(v));
}
const float* f(ConstView v) { return in<float>(v); }
float* f(View v) { return out<float>(v); }
const std::int32_t* ids(ConstView v) { return in<std::int32_t>(v); }

// Rounds n fp32 values in place to the nearest bf16 (ties to even): what a bf16 store does.
void round_bf16(float* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) x[i] = bf16_to_f32(f32_to_bf16(x[i]));
}
void round_bf16(View v, std::int64_t n) {
  if (!v.empty()) round_bf16(f(v), n);
}

}  // namespace

CpuBackend::CpuBackend(int threads, DType compute)
    : memory_(std::make_unique<HostMemory>()), threads_(threads), compute_(compute) {
  if (threads < 1) fail("the CPU backend needs at least 1 compute thread, got {}", threads);
  if (compute != DType::f32 && compute != DType::bf16) {
    fail("the CPU backend computes in float32 or bfloat16, not {}", dtype_name(compute));
  }
  k::set_num_threads(threads);
}

DeviceMemory& CpuBackend::memory() { return *memory_; }

PeakFlops CpuBackend::measure_peak_flops() {
  PeakFlops peak;
  // The best FMA peak measured on this CPU so far (core/peak_cache.h): one measurement moves with the load.
  const CachedPeak cached = cpu_peak_flops(threads_);
  peak.device = cached.flops;
  peak.source = fmt::format("{} FMA loop, {:.1f} GFLOP/s per core x {} thread(s); {}", detect_cpu_features().fma_path,
                            peak.device / threads_ / 1e9, threads_, cached.describe());
  // An MLP projection of a 512-token microbatch of a 1024-wide model: y = x W^T as linear_forward
  // computes it. The first product warms caches and the GEMM's threads; the best of the rest counts.
  constexpr std::int64_t rows = 512, out_features = 2816, in_features = 1024;
  std::vector<float> x(static_cast<std::size_t>(rows * in_features), 0.5f);
  std::vector<float> w(static_cast<std::size_t>(out_features * in_features), 0.25f);
  std::vector<float> y(static_cast<std::size_t>(rows * out_features), 0.0f);
  for (int i = 0; i < 4; ++i) {
    const auto start = std::chrono::steady_clock::now();
    k::gemm<float>(false, true, rows, out_features, in_features, 1.0f, x.data(), in_features, w.data(), in_features,
                   0.0f, y.data(), out_features);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (i > 0 && seconds > 0) peak.gemm = std::max(peak.gemm, 2.0 * rows * out_features * in_features / seconds);
  }
  return peak;
}

DeviceDescription CpuBackend::describe() {
  const CpuFeatures cpu = detect_cpu_features();
  const k::GemmInfo gemm = k::gemm_info();
  DeviceDescription d;
  d.text = fmt::format("{}: {}; GEMM {} ({}, {})", name(), cpu.describe(), gemm.library, gemm.isa, gemm.kernel);
  // Compared by what fp32 products can use (vector width), so a library without a name for the
  // CPU's newest extensions (oneDNN 2.6 has no avx512_core_fp16) is not reported as slow.
  const int gemm_level = fp32_vector_level(gemm.isa), cpu_level = fp32_vector_level(cpu.isa);
  if (gemm_level >= 0 && cpu_level >= 0 && gemm_level < cpu_level) {
    d.warning = fmt::format("the GEMMs run {} kernels but this CPU supports {}: they leave part of its vector "
                            "units idle (check the GEMM library's build and dispatch)",
                            gemm.isa, cpu.isa);
  }
  return d;
}

ConstView CpuBackend::weights(const float* unit, std::int64_t count) {
  if (!rounds()) return Backend::weights(unit, count);
  ODC_CHECK(count >= 0, "weights() of {} elements", count);
  // Copies live in this backend's memory (mapped, like the activations: no heap holes left behind
  // when a storage grows).
  auto [copy, fresh] = weight_copies_.acquire(unit, [&] { return WeightCopy{Buffer(*memory_, DType::f32), 0}; });
  if (!fresh) {
    ODC_CHECK(copy.count == count, "weights() of a unit with a live bf16 copy of {} elements, now asked for {}",
              copy.count, count);
    return copy.buffer.get(count);
  }
  copy.count = count;
  const View v = copy.buffer.get(count);
  auto* data = static_cast<float*>(v.data);
  std::copy(unit, unit + count, data);
  round_bf16(data, count);
  return v;
}

void CpuBackend::release_weights(const float* unit) { weight_copies_.release(unit); }
void CpuBackend::keep_weight_copies(bool keep) { weight_copies_.set_keep(keep); }
void CpuBackend::weights_changed() { weight_copies_.invalidate(); }
void CpuBackend::forget_weight_copies() { weight_copies_.forget(); }

ConstView CpuBackend::upload(std::span<const std::int32_t> host, Buffer&) {
  return {host.data(), DType::i32, Device::cpu(), static_cast<std::int64_t>(host.size())};
}

ConstView CpuBackend::upload(std::span<const float> host, Buffer&) {
  return {host.data(), DType::f32, Device::cpu(), static_cast<std::int64_t>(host.size())};
}

void CpuBackend::download(ConstView source, std::span<float> host) {
  ODC_CHECK(static_cast<std::int64_t>(host.size()) == source.count, "download of {} elements into {}", source.count,
            host.size());
  if (!host.empty()) std::memcpy(host.data(), f(source), host.size_bytes());
}

void CpuBackend::copy(ConstView source, View target) {
  ODC_CHECK(source.count == target.count && source.dtype == target.dtype, "copy of {} {} into {} {}", source.count,
            dtype_name(source.dtype), target.count, dtype_name(target.dtype));
  if (source.count > 0) std::memcpy(out<float>(target), f(source), static_cast<std::size_t>(source.count) * dtype_size(source.dtype));
}

void CpuBackend::zero(View target) {
  if (target.count > 0) std::memset(f(target), 0, static_cast<std::size_t>(target.count) * dtype_size(target.dtype));
}

void CpuBackend::add(ConstView x, View y) {
  ODC_CHECK(x.count == y.count && x.dtype == y.dtype, "add of {} {} into {} {}", x.count, dtype_name(x.dtype), y.count,
            dtype_name(y.dtype));
  const float* in = f(x);
  float* acc = f(y);
  for (std::int64_t i = 0; i < x.count; ++i) acc[i] += in[i];
  if (rounds()) round_bf16(y, y.count);
}

void CpuBackend::gather_rows(ConstView source, ConstView rows, std::int64_t width, View target) {
  const float* src = f(source);
  const std::int32_t* index = ids(rows);
  float* dst = f(target);
  for (std::int64_t i = 0; i < rows.count; ++i) {
    std::memcpy(dst + i * width, src + static_cast<std::int64_t>(index[i]) * width, static_cast<std::size_t>(width) * sizeof(float));
  }
}

void CpuBackend::scatter_rows(ConstView source, ConstView rows, std::int64_t width, View target) {
  const float* src = f(source);
  const std::int32_t* index = ids(rows);
  float* dst = f(target);
  for (std::int64_t i = 0; i < rows.count; ++i) {
    std::memcpy(dst + static_cast<std::int64_t>(index[i]) * width, src + i * width, static_cast<std::size_t>(width) * sizeof(float));
  }
}

void CpuBackend::rmsnorm_forward(ConstView x, ConstView weight, View y, View rstd, std::int64_t rows, std::int64_t dim,
                                 double eps) {
  k::rmsnorm_forward<float>(f(x), f(weight), f(y), f(rstd), rows, dim, eps);
  if (rounds()) round_bf16(y, rows * dim);
}

void CpuBackend::rmsnorm_backward(ConstView dy, ConstView x, ConstView weight, ConstView rstd, View dx, View dweight,
                                  std::int64_t rows, std::int64_t dim, bool dx_accumulate) {
  k::rmsnorm_backward<float>(f(dy), f(x), f(weight), f(rstd), f(dx), f(dweight), rows, dim, dx_accumulate);
  if (rounds()) round_bf16(dx, rows * dim);
}

void CpuBackend::linear_forward(ConstView x, ConstView weight, ConstView bias, View y, std::int64_t rows,
                                std::int64_t in_features, std::int64_t out_features) {
  k::linear_forward<float>(f(x), f(weight), f(bias), f(y), rows, in_features, out_features);
  if (rounds()) round_bf16(y, rows * out_features);
}

void CpuBackend::linear_forward_add(ConstView x, ConstView weight, View y, std::int64_t rows, std::int64_t in_features,
                                    std::int64_t out_features) {
  k::gemm<float>(false, true, rows, out_features, in_features, 1.0f, f(x), in_features, f(weight), in_features, 1.0f,
                 f(y), out_features);
  if (rounds()) round_bf16(y, rows * out_features);
}

void CpuBackend::linear_backward(ConstView dy, ConstView x, ConstView weight, View dx, View dweight, View dbias,
                                 std::int64_t rows, std::int64_t in_features, std::int64_t out_features,
                                 bool dx_accumulate) {
  k::linear_backward<float>(f(dy), f(x), f(weight), f(dx), f(dweight), f(dbias), rows, in_features, out_features,
                            dx_accumulate);
  if (rounds()) round_bf16(dx, rows * in_features);
}

void CpuBackend::rope_tables(ConstView positions, std::int64_t tokens, const std::vector<double>& inv_freq, View cos,
                             View sin) {
  k::rope_tables<float>(ids(positions), tokens, inv_freq, f(cos), f(sin));
}

void CpuBackend::rope_forward(View x, ConstView cos, ConstView sin, std::int64_t tokens, int heads, int head_dim) {
  k::rope_forward<float>(f(x), f(cos), f(sin), tokens, heads, head_dim);
  if (rounds()) round_bf16(x, tokens * heads * head_dim);
}

void CpuBackend::rope_backward(View dx, ConstView cos, ConstView sin, std::int64_t tokens, int heads, int head_dim) {
  k::rope_backward<float>(f(dx), f(cos), f(sin), tokens, heads, head_dim);
  if (rounds()) round_bf16(dx, tokens * heads * head_dim);
}

namespace {
k::AttentionShape cpu_shape(const AttentionShape& s) {
  k::AttentionShape shape{ids(s.cu_seqlens), s.num_seqs, s.tokens, s.n_heads, s.n_kv_heads, s.head_dim};
  if (!s.cu_seqlens_k.empty()) {  // key segments (context parallelism)
    if (s.cu_seqlens_k.count != s.num_seqs + 1) {
      fail("attention: cu_seqlens_k has {} entries for {} sequences (needs {})", s.cu_seqlens_k.count, s.num_seqs,
           s.num_seqs + 1);
    }
    shape.cu_seqlens_k = ids(s.cu_seqlens_k);
    shape.key_tokens = s.key_tokens;
  }
  return shape;
}
}  // namespace

void CpuBackend::attention_forward(const AttentionShape& shape, ConstView q, ConstView k_, ConstView v, View o,
                                   View lse) {
  if (rounds()) {
    bf16::attention_forward(cpu_shape(shape), f(q), f(k_), f(v), f(o), f(lse));
  } else {
    k::attention_forward<float>(cpu_shape(shape), f(q), f(k_), f(v), f(o), f(lse));
  }
}

void CpuBackend::attention_backward(const AttentionShape& shape, ConstView q, ConstView k_, ConstView v, ConstView o,
                                    ConstView lse, ConstView dout, View dq, View dk, View dv) {
  if (rounds()) {
    bf16::attention_backward(cpu_shape(shape), f(q), f(k_), f(v), f(o), f(lse), f(dout), f(dq), f(dk), f(dv));
  } else {
    k::attention_backward<float>(cpu_shape(shape), f(q), f(k_), f(v), f(o), f(lse), f(dout), f(dq), f(dk), f(dv));
  }
}

void CpuBackend::attention_cached(const CachedAttentionShape& shape, ConstView q, ConstView k_cache,
                                  ConstView v_cache, View o) {
  const std::int64_t keys = shape.past + shape.queries;
  const std::int64_t q_elems = shape.queries * shape.n_heads * shape.head_dim;
  const std::int64_t kv_elems = keys * shape.n_kv_heads * shape.head_dim;
  ODC_CHECK(q.count >= q_elems && o.count >= q_elems && k_cache.count >= kv_elems && v_cache.count >= kv_elems,
            "attention_cached: {} queries after {} cached rows need {} query and {} cache elements, got q {}, out {}, "
            "k {}, v {}", shape.queries, shape.past, q_elems, kv_elems, q.count, o.count, k_cache.count, v_cache.count);
  // bf16 mode: the CUDA kernel keeps scores and probabilities in fp32 and rounds only its output.
  k::attention_cached_forward<float>({shape.queries, shape.past, shape.n_heads, shape.n_kv_heads, shape.head_dim},
                                     f(q), f(k_cache), f(v_cache), f(o));
  if (rounds()) round_bf16(o, q_elems);
}

void CpuBackend::attention_decode_batch(const DecodeAttentionShape& shape, ConstView q, ConstView k_new,
                                        ConstView v_new, std::span<const View> k_caches,
                                        std::span<const View> v_caches, View o) {
  if (per_sequence_decode()) {
    Backend::attention_decode_batch(shape, q, k_new, v_new, k_caches, v_caches, o);
    return;
  }
  check_decode_batch(shape, q, k_new, v_new, k_caches, v_caches, o);
  std::vector<float*> keys(shape.past.size()), values(shape.past.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    keys[i] = f(k_caches[i]);
    values[i] = f(v_caches[i]);
  }
  k::attention_decode_batch_forward<float>({shape.past, shape.n_heads, shape.n_kv_heads, shape.head_dim}, f(q),
                                           f(k_new), f(v_new), keys.data(), values.data(), f(o), rounds());
}

void CpuBackend::swiglu_forward(ConstView gate_up, View h, std::int64_t rows, std::int64_t width) {
  const float* gu = f(gate_up);
  float* out = f(h);
  for (std::int64_t r = 0; r < rows; ++r) {
    k::swiglu_forward<float>(gu + r * 2 * width, gu + r * 2 * width + width, out + r * width, width);
  }
  if (rounds()) round_bf16(h, rows * width);
}

void CpuBackend::swiglu_backward(ConstView dh, ConstView gate_up, View dgate_up, std::int64_t rows, std::int64_t width) {
  const float* d = f(dh);
  const float* gu = f(gate_up);
  float* dgu = f(dgate_up);
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t row = r * 2 * width;
    k::swiglu_backward<float>(d + r * width, gu + row, gu + row + width, dgu + row, dgu + row + width, width);
  }
  if (rounds()) round_bf16(dgate_up, rows * 2 * width);
}

void CpuBackend::embedding_forward(ConstView token_ids, ConstView table, View o, std::int64_t tokens, std::int64_t dim) {
  // bf16 mode: the table is a bf16 copy (weights()), so the gathered rows are bf16 already.
  k::embedding_forward<float>(ids(token_ids), f(table), f(o), tokens, dim);
}

void CpuBackend::embedding_backward(ConstView token_ids, ConstView dout, View dtable, std::int64_t tokens,
                                    std::int64_t dim) {
  k::embedding_backward<float>(ids(token_ids), f(dout), f(dtable), tokens, dim);
}

void CpuBackend::scale(View x, double alpha) {
  Backend::scale(x, alpha);
  if (rounds()) round_bf16(x, x.count);
}

void CpuBackend::row_entropy(ConstView logits, std::int64_t rows, std::int64_t vocab, View out) {
  ODC_CHECK(out.count >= rows && logits.count >= rows * vocab,
            "row_entropy: {} rows of {} into {} values from a view of {}", rows, vocab, out.count, logits.count);
  k::row_entropy(f(logits), rows, vocab, f(out));
}

void CpuBackend::policy_coefficients(ConstView nll, ConstView old_logp, ConstView advantages, ConstView ref_logp,
                                     ConstView weights, ConstView entropy, std::int64_t rows,
                                     const kernels::PolicyLossParams& params, View coef, kernels::PolicyLossSums& sums) {
  for (const ConstView v : {nll, old_logp, advantages, weights, ConstView(coef)}) {
    ODC_CHECK(v.count >= rows, "policy_coefficients: a view of {} values for {} rows", v.count, rows);
  }
  ODC_CHECK((ref_logp.empty() || ref_logp.count >= rows) && (entropy.empty() || entropy.count >= rows),
            "policy_coefficients: reference ({}) or entropy ({}) values short of {} rows", ref_logp.count, entropy.count,
            rows);
  k::policy_coefficients(f(nll), f(old_logp), f(advantages), ref_logp.empty() ? nullptr : f(ref_logp), f(weights),
                         entropy.empty() ? nullptr : f(entropy), rows, params, f(coef), sums);
}

void CpuBackend::cross_entropy(ConstView logits, ConstView targets, ConstView weights, std::int64_t rows,
                               std::int64_t vocab, View dlogits, View nll, LossSums& sums) {
  float* row_nll = f(nll);
  sums.weighted += k::cross_entropy_forward_backward<float>(f(logits), ids(targets), in<float>(weights), rows, vocab,
                                                            f(dlogits), row_nll);
  if (rounds()) round_bf16(dlogits, rows * vocab);
  for (std::int64_t i = 0; i < rows; ++i) sums.nll += row_nll[i];
}

}  // namespace odc::backend
