// The Backend interface's default implementations: the host kernels, as the CPU backend runs them.
// A device backend overrides every one of them (its memory is not host-addressable).
#include "odc/backend/backend.h"

#include <algorithm>
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

void Backend::row_entropy(ConstView logits, std::int64_t rows, std::int64_t vocab, std::span<float> host) {
  ODC_CHECK(static_cast<std::int64_t>(host.size()) >= rows && logits.count >= rows * vocab,
            "row_entropy: {} rows of {} into {} values from a view of {}", rows, vocab, host.size(), logits.count);
  std::vector<float> values(static_cast<std::size_t>(rows * vocab));
  download(logits.at(0, rows * vocab), values);
  kernels::cpu::row_entropy(values.data(), rows, vocab, host.data());
}

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
