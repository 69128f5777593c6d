// The Backend interface's default implementations: the host kernels, as the CPU backend runs them.
// A device backend overrides every one of them (its memory is not host-addressable).
#include "odc/backend/backend.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "odc/core/error.h"
#include "odc/core/process_stats.h"
#include "odc/kernels/policy_loss.h"

namespace odc::backend {

namespace {

// The raw fp32 pointer of a host view (the defaults run on the host).
const float* host_f32(ConstView v, const char* what) {
  ODC_CHECK(v.device.kind == DeviceKind::cpu, "{}: the default (host) implementation got a view of device memory", what);
  ODC_CHECK(v.empty() || v.count == 0 || v.dtype == DType::f32, "{}: expected an f32 view, got {}", what,
            dtype_name(v.dtype));
  return static_cast<const float*>(v.data);
}
float* host_f32(View v, const char* what) { return const_cast<float*>(host_f32(ConstView(v), what)); }

}  // namespace

DType activation_dtype_of(DeviceKind kind) { return kind == DeviceKind::cpu ? DType::f32 : DType::bf16; }

std::int64_t weight_copy_element_bytes(DeviceKind kind, DType compute) {
  if (kind != DeviceKind::cpu) return 2;        // the CUDA backend's bf16 copies
  return compute == DType::f32 ? 0 : 4;         // the CPU's bf16 mode rounds into fp32 copies
}

std::int64_t head_chunk_rows_of(DeviceKind kind, std::int64_t vocab) {
  const std::int64_t v = std::max<std::int64_t>(vocab, 1);
  // A GPU: up to 128 Mi bf16 logits (256 MiB) per chunk: long GEMMs, few launches. The CPU:
  // ~4 Mi logits (16 MiB).
  if (kind != DeviceKind::cpu) return std::clamp<std::int64_t>((std::int64_t{128} << 20) / v, 64, 16384);
  return std::clamp<std::int64_t>((std::int64_t{4} << 20) / v, 16, 2048);
}

void Backend::linear_forward_residual(ConstView x, ConstView weight, ConstView residual, View y, std::int64_t rows,
                                      std::int64_t in, std::int64_t out) {
  if (residual.data != y.data) copy(residual.at(0, rows * out), y.at(0, rows * out));
  linear_forward_add(x, weight, y, rows, in, out);
}

std::int64_t Backend::memory_capacity(int ranks_on_host) {
  return read_available_memory() / std::max(ranks_on_host, 1);
}

std::int64_t Backend::head_chunk_rows(std::int64_t vocab) const { return head_chunk_rows_of(DeviceKind::cpu, vocab); }

void Backend::scale(View x, double alpha) {
  ODC_CHECK(x.device.kind == DeviceKind::cpu && (x.empty() || x.dtype == DType::f32),
            "scale: the default (host) implementation takes host f32, got {}", dtype_name(x.dtype));
  auto* data = static_cast<float*>(x.data);
  const auto a = static_cast<float>(alpha);
  for (std::int64_t i = 0; i < x.count; ++i) data[i] *= a;
}

void Backend::row_entropy(ConstView logits, std::int64_t rows, std::int64_t vocab, View out) {
  ODC_CHECK(out.count >= rows && logits.count >= rows * vocab && out.dtype == DType::f32,
            "row_entropy: {} rows of {} into {} {} values from a view of {}", rows, vocab, out.count,
            dtype_name(out.dtype), logits.count);
  std::vector<float> values(static_cast<std::size_t>(rows * vocab));
  download(logits.at(0, rows * vocab), values);
  std::vector<float> entropies(static_cast<std::size_t>(rows));
  kernels::cpu::row_entropy(values.data(), rows, vocab, entropies.data());
  Buffer staging(memory(), DType::f32);
  copy(upload(std::span<const float>(entropies), staging), out.at(0, rows));
}

void Backend::policy_coefficients(ConstView nll, ConstView old_logp, ConstView advantages, ConstView ref_logp,
                                  ConstView weights, ConstView entropy, std::int64_t rows,
                                  const kernels::PolicyLossParams& params, View coef, kernels::PolicyLossSums& sums) {
  const auto n = static_cast<std::size_t>(rows);
  // Each input on the host (a device view downloaded; an empty one stays empty).
  const auto host = [&](ConstView v, const char* what, bool optional) {
    std::vector<float> values;
    if (optional && v.empty()) return values;
    ODC_CHECK(v.count >= rows && v.dtype == DType::f32, "policy_coefficients: {} holds {} {} values for {} rows", what,
              v.count, dtype_name(v.dtype), rows);
    values.resize(n);
    download(v.at(0, rows), values);
    return values;
  };
  const std::vector<float> n_ = host(nll, "nll", false), o = host(old_logp, "old_logp", false),
                           a = host(advantages, "advantages", false), r = host(ref_logp, "ref_logp", true),
                           w = host(weights, "weights", false), e = host(entropy, "entropy", true);
  ODC_CHECK(coef.count >= rows && coef.dtype == DType::f32, "policy_coefficients: coef holds {} {} values for {} rows",
            coef.count, dtype_name(coef.dtype), rows);
  std::vector<float> c(n);
  kernels::cpu::policy_coefficients(n_.data(), o.data(), a.data(), r.empty() ? nullptr : r.data(), w.data(),
                                    e.empty() ? nullptr : e.data(), rows, params, c.data(), sums);
  Buffer staging(memory(), DType::f32);
  copy(upload(std::span<const float>(c), staging), coef.at(0, rows));
}

void check_decode_batch(const DecodeAttentionShape& shape, ConstView q, ConstView k_new, ConstView v_new,
                        std::span<const View> k_caches, std::span<const View> v_caches, ConstView out) {
  const auto count = static_cast<std::int64_t>(shape.past.size());
  const std::int64_t kv = std::int64_t{shape.n_kv_heads} * shape.head_dim;
  const std::int64_t qd = std::int64_t{shape.n_heads} * shape.head_dim;
  ODC_CHECK(static_cast<std::int64_t>(k_caches.size()) == count && static_cast<std::int64_t>(v_caches.size()) == count,
            "attention_decode_batch: {} sequences, {} key and {} value caches", count, k_caches.size(),
            v_caches.size());
  ODC_CHECK(q.count >= count * qd && out.count >= count * qd && k_new.count >= count * kv && v_new.count >= count * kv,
            "attention_decode_batch: {} sequences need {} query and {} new key/value elements, got q {}, out {}, "
            "k {}, v {}", count, count * qd, count * kv, q.count, out.count, k_new.count, v_new.count);
  for (std::size_t i = 0; i < shape.past.size(); ++i) {
    const std::int64_t rows = shape.past[i] + 1;
    ODC_CHECK(shape.past[i] >= 0 && k_caches[i].count >= rows * kv && v_caches[i].count >= rows * kv,
              "attention_decode_batch: sequence {} after {} cached rows needs caches of {} elements, got k {}, v {}", i,
              shape.past[i], rows * kv, k_caches[i].count, v_caches[i].count);
  }
}

void Backend::attention_decode_batch(const DecodeAttentionShape& shape, ConstView q, ConstView k_new, ConstView v_new,
                                     std::span<const View> k_caches, std::span<const View> v_caches, View out) {
  check_decode_batch(shape, q, k_new, v_new, k_caches, v_caches, out);
  const auto count = static_cast<std::int64_t>(shape.past.size());
  const std::int64_t kv = std::int64_t{shape.n_kv_heads} * shape.head_dim;
  const std::int64_t qd = std::int64_t{shape.n_heads} * shape.head_dim;
  for (std::int64_t i = 0; i < count; ++i) {
    const auto s = static_cast<std::size_t>(i);
    const std::int64_t past = shape.past[s];
    copy(k_new.at(i * kv, kv), k_caches[s].at(past * kv, kv));
    copy(v_new.at(i * kv, kv), v_caches[s].at(past * kv, kv));
    attention_cached({1, past, shape.n_heads, shape.n_kv_heads, shape.head_dim}, q.at(i * qd, qd),
                     k_caches[s].at(0, (past + 1) * kv), v_caches[s].at(0, (past + 1) * kv), out.at(i * qd, qd));
  }
}

namespace {
// The host's clock: a mark is taken once every op issued so far has finished.
class HostTimeline final : public OpTimeline {
 public:
  explicit HostTimeline(Backend& backend) : backend_(backend) {}
  std::size_t mark() override {
    backend_.synchronize();
    marks_.push_back(std::chrono::steady_clock::now());
    return marks_.size() - 1;
  }
  double seconds(std::size_t a, std::size_t b) override {
    ODC_CHECK(a <= b && b < marks_.size(), "OpTimeline: marks {} and {} of {}", a, b, marks_.size());
    return std::chrono::duration<double>(marks_[b] - marks_[a]).count();
  }
  void reset() override { marks_.clear(); }

 private:
  Backend& backend_;
  std::vector<std::chrono::steady_clock::time_point> marks_;
};
}  // namespace

std::unique_ptr<OpTimeline> Backend::make_timeline() { return std::make_unique<HostTimeline>(*this); }

double Backend::sum_of_squares(ConstView x) {
  return kernels::cpu::sum_of_squares(host_f32(x, "sum_of_squares"), x.count);
}

void Backend::adamw_step(std::span<const AdamWSegment> segments, const kernels::AdamWParams& params) {
  for (const auto& s : segments) {
    ODC_CHECK(s.grad.count == s.param.count && s.exp_avg.count == s.param.count && s.exp_avg_sq.count == s.param.count,
              "adamw_step: a segment's param/grad/moments differ in length ({}, {}, {}, {})", s.param.count,
              s.grad.count, s.exp_avg.count, s.exp_avg_sq.count);
    kernels::AdamWParams p = params;
    if (!s.weight_decay) p.weight_decay = 0.0;
    kernels::cpu::adamw_step(host_f32(s.param, "adamw_step"), host_f32(s.grad, "adamw_step"),
                             host_f32(s.exp_avg, "adamw_step"), host_f32(s.exp_avg_sq, "adamw_step"), s.param.count, p);
  }
}

}  // namespace odc::backend
