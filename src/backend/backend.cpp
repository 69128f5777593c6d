// The Backend interface's default implementations: the host kernels, as the CPU backend runs them.
// A device backend overrides every one of them (its memory is not host-addressable).
#include "odc/backend/backend.h"

#include <algorithm>

#include "odc/core/error.h"

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

std::int64_t Backend::head_chunk_rows(std::int64_t vocab) const {
  return std::clamp<std::int64_t>((std::int64_t{4} << 20) / std::max<std::int64_t>(vocab, 1), 16, 2048);
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
