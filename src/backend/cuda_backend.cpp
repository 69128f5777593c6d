// CudaBackend: memory, data movement, the per-microbatch hooks, the optimizer-side ops and the
// peak-FLOP measurement (the model's compute ops: cuda_backend_ops.cpp).
#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cuda_backend_impl.h"
#include "odc/kernels/cuda_backend_ops.h"
#include "odc/kernels/cuda_cast.h"
#include "odc/kernels/cuda_ops.h"
#include "odc/kernels/cuda_policy_loss.h"

namespace odc::backend {

namespace cu = kernels::cuda;

void* CudaMemory::allocate(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = allocator_.allocate(bytes, stream_.handle());
  cu::memset_async(p, 0, bytes, stream_.handle());
  return p;
}

void CudaMemory::deallocate(void* data, std::size_t) noexcept { allocator_.deallocate(data); }

void check_view(const ConstView& v, DType dtype, const char* what) {
  ODC_CHECK(v.device.kind == DeviceKind::cuda, "the CUDA backend's {} got a view of host memory", what);
  ODC_CHECK(v.empty() || v.count == 0 || v.dtype == dtype, "the CUDA backend's {} got a {} view, expected {}", what,
            dtype_name(v.dtype), dtype_name(dtype));
}

CudaBackend::Impl::Impl(int device_index)
    : device((cu::set_device(device_index), device_index)),
      memory(device_index, allocator, stream),
      loss_sums(memory, DType::f64),
      row_loss(memory, DType::f64),
      chunk_nll(memory, DType::f32),
      reduce(memory, DType::f64),
      policy_sums(memory, DType::f64),
      policy_partials(memory, DType::f64),
      inv_freq(memory, DType::f64),
      decode_table(memory, DType::i32) {
  loss_sums.get(2);  // zero-filled: no pending sums
  policy_sums.get(cu::kPolicySumFields);
}

CudaBackend::Impl::~Impl() {
  // Kernels may still read blocks that are about to return to the allocator and be freed.
  try {
    stream.synchronize();
  } catch (const Error&) {  // a failed device: nothing left to protect
  }
  live_weights.clear();
}

CudaBackend::CudaBackend(int device, kernels::AttentionMode attention, std::int64_t cudnn_workspace_bytes)
    : impl_(std::make_unique<Impl>(device)) {
  impl_->attention_mode = attention;
  impl_->cudnn_workspace_bytes = cudnn_workspace_bytes;
}
CudaBackend::~CudaBackend() = default;

DeviceMemory& CudaBackend::memory() { return impl_->memory; }
void* CudaBackend::native_stream() const { return impl_->s(); }
void CudaBackend::synchronize() { impl_->stream.synchronize(); }

namespace {

// Timing events on one stream. Events are created in batches as marks outrun the pool (creating
// one is a host call that touches no stream) and live until the timeline does.
class EventTimeline final : public OpTimeline {
 public:
  explicit EventTimeline(const cu::Stream& stream) : stream_(stream) {}
  std::size_t mark() override {
    if (used_ == events_.size()) {
      const std::size_t grow = std::max<std::size_t>(events_.size(), 256);
      events_.reserve(events_.size() + grow);
      for (std::size_t i = 0; i < grow; ++i) events_.emplace_back(true);
    }
    events_[used_].record(stream_);
    return used_++;
  }
  double seconds(std::size_t a, std::size_t b) override {
    ODC_CHECK(a <= b && b < used_, "OpTimeline: marks {} and {} of {}", a, b, used_);
    events_[b].synchronize();
    return static_cast<double>(events_[a].elapsed_ms(events_[b])) / 1e3;
  }
  void reset() override { used_ = 0; }

 private:
  const cu::Stream& stream_;
  std::vector<cu::Event> events_;
  std::size_t used_ = 0;
};

}  // namespace

std::unique_ptr<OpTimeline> CudaBackend::make_timeline() { return std::make_unique<EventTimeline>(impl_->stream); }

PeakFlops CudaBackend::measure_peak_flops() {
  constexpr std::int64_t n = 8192;
  Buffer a(impl_->memory, DType::bf16), b(impl_->memory, DType::bf16), c(impl_->memory, DType::bf16);
  const View va = a.get(n * n), vb = b.get(n * n), vc = c.get(n * n);
  {
    // Random normal operands: on Hopper a product of zeros runs ~13% faster than one of real data,
    // which would inflate MFU's denominator. One 1M-element random block, tiled over both operands.
    constexpr std::int64_t block = std::int64_t{1} << 20;
    std::mt19937 rng(7);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> host(static_cast<std::size_t>(block));
    for (auto& v : host) v = dist(rng);
    Buffer staging(impl_->memory, DType::f32);
    const View vs = staging.get(block);
    cu::copy_to_device_async(vs.data, host.data(), static_cast<std::size_t>(block) * 4, impl_->s());
    for (std::int64_t off = 0; off < n * n; off += block) {
      for (const View* v : {&va, &vb}) {
        cu::cast_f32_to_bf16(static_cast<const float*>(vs.data), static_cast<std::uint16_t*>(v->data) + off,
                             std::min(block, n * n - off), impl_->s());
      }
    }
    impl_->stream.synchronize();  // the host block outlives the copy
  }
  auto run = [&] {
    cu::gemm(impl_->blas, false, true, n, n, n, 1.0f, static_cast<const std::uint16_t*>(va.data), n,
             static_cast<const std::uint16_t*>(vb.data), n, 0.0f, vc.data, n, cu::GemmOut::bf16, impl_->s());
  };
  run();  // warm-up: the heuristic query and the kernel's first launch
  double best = std::numeric_limits<double>::infinity();
  for (int rep = 0; rep < 5; ++rep) {
    cu::Event start(true), stop(true);
    start.record(impl_->stream);
    run();
    stop.record(impl_->stream);
    stop.synchronize();
    best = std::min(best, static_cast<double>(start.elapsed_ms(stop)) / 1e3);
  }
  const double rate = 2.0 * static_cast<double>(n) * n * n / best;
  return {rate, rate, "the best of 5 bf16 8192^3 cuBLASLt GEMMs"};
}

DeviceDescription CudaBackend::describe() {
  return {fmt::format("cuda: device {}; GEMM cuBLASLt (bf16 inputs, fp32 accumulation)", impl_->device), {}};
}

ConstView CudaBackend::weights(const float* unit, std::int64_t count) {
  auto [copy, fresh] = impl_->live_weights.acquire(unit, [&] { return Buffer(impl_->memory, DType::bf16); });
  if (!fresh) {
    ODC_CHECK(count * 2 <= copy.capacity_bytes(), "weights(): unit asked for {} elements, its live copy holds {}",
              count, copy.capacity_bytes() / 2);
    return copy.get(count);  // the same block: the copy (live, or kept since this step began) is reused
  }
  // A released copy's block is reused (stream order protects kernels still reading it).
  const View v = copy.get(count);
  cu::cast_f32_to_bf16(unit, static_cast<std::uint16_t*>(v.data), count, impl_->s());
  return v;
}

void CudaBackend::release_weights(const float* unit) { impl_->live_weights.release(unit); }
void CudaBackend::keep_weight_copies(bool keep) { impl_->live_weights.set_keep(keep); }
void CudaBackend::weights_changed() { impl_->live_weights.invalidate(); }
void CudaBackend::forget_weight_copies() { impl_->live_weights.forget(); }

void* PinnedStaging::stage(const void* host, std::size_t bytes) {
  constexpr std::size_t kAlign = 256;
  const std::size_t need = (bytes + kAlign - 1) / kAlign * kAlign;
  Arena* a = &arenas_[current_];
  if (a->used + need > a->memory.bytes()) {
    // The other arena, once its last copy has run (it has been idle for a whole arena's worth).
    current_ = 1 - current_;
    a = &arenas_[current_];
    if (a->pending) a->copied.synchronize();
    a->pending = false;
    a->used = 0;
    if (need > a->memory.bytes()) a->memory = cu::PinnedBuffer(std::max(need, std::max(2 * a->memory.bytes(), kInitialBytes)));
  }
  void* at = static_cast<char*>(a->memory.get()) + a->used;
  std::memcpy(at, host, bytes);
  a->used += need;
  return at;
}

void PinnedStaging::record(const cu::Stream& stream) {
  arenas_[current_].copied.record(stream);
  arenas_[current_].pending = true;
}

View CudaBackend::Impl::upload(const void* host, std::size_t bytes, std::int64_t count, Buffer& target) {
  const View v = target.get(count);
  if (bytes == 0) return v;
  cu::copy_to_device_async(v.data, staging.stage(host, bytes), bytes, s());
  staging.record(stream);
  return v;
}

ConstView CudaBackend::upload(std::span<const std::int32_t> host, Buffer& staging) {
  ODC_CHECK(staging.dtype() == DType::i32, "upload of int32 data into a {} staging buffer", dtype_name(staging.dtype()));
  return impl_->upload(host.data(), host.size_bytes(), static_cast<std::int64_t>(host.size()), staging);
}

ConstView CudaBackend::upload(std::span<const float> host, Buffer& staging) {
  ODC_CHECK(staging.dtype() == DType::f32, "upload of float32 data into a {} staging buffer", dtype_name(staging.dtype()));
  return impl_->upload(host.data(), host.size_bytes(), static_cast<std::int64_t>(host.size()), staging);
}

void CudaBackend::download(ConstView source, std::span<float> host) {
  ODC_CHECK(static_cast<std::int64_t>(host.size()) == source.count, "download of {} elements into {}", source.count,
            host.size());
  ODC_CHECK(source.device.kind == DeviceKind::cuda, "the CUDA backend's download got a view of host memory");
  if (source.count == 0) return;
  if (source.dtype == DType::f32) {
    cu::copy_to_host_async(host.data(), source.data, host.size_bytes(), impl_->s());
    impl_->stream.synchronize();
    return;
  }
  ODC_CHECK(source.dtype == DType::bf16, "download of a {} view (float32 or bfloat16 only)", dtype_name(source.dtype));
  std::vector<std::uint16_t> bits(host.size());
  cu::copy_to_host_async(bits.data(), source.data, bits.size() * sizeof(std::uint16_t), impl_->s());
  impl_->stream.synchronize();
  std::transform(bits.begin(), bits.end(), host.begin(), bf16_to_f32);
}

void CudaBackend::copy(ConstView source, View target) {
  ODC_CHECK(source.count == target.count && source.dtype == target.dtype, "copy of {} {} into {} {}", source.count,
            dtype_name(source.dtype), target.count, dtype_name(target.dtype));
  check_view(source, source.dtype, "copy");
  check_view(target, target.dtype, "copy");
  if (source.count > 0) {
    cu::copy_device_async(target.data, source.data, static_cast<std::size_t>(source.count) * dtype_size(source.dtype),
                          impl_->s());
  }
}

void CudaBackend::add(ConstView x, View y) {
  ODC_CHECK(x.count == y.count && x.dtype == y.dtype, "add of {} {} into {} {}", x.count, dtype_name(x.dtype), y.count,
            dtype_name(y.dtype));
  check_view(x, x.dtype, "add");
  check_view(y, y.dtype, "add");
  if (x.count == 0) return;
  if (x.dtype == DType::f32) {
    cu::add_f32(static_cast<float*>(y.data), static_cast<const float*>(x.data), x.count, impl_->s());
  } else {
    cu::add_bf16(y.data, x.data, x.count, impl_->s());
  }
}

void CudaBackend::zero(View target) {
  check_view(target, target.dtype, "zero");
  if (target.count > 0) {
    cu::memset_async(target.data, 0, static_cast<std::size_t>(target.count) * dtype_size(target.dtype), impl_->s());
  }
}

void CudaBackend::gather_rows(ConstView source, ConstView rows, std::int64_t width, View target) {
  check_view(source, target.dtype, "gather_rows");
  check_view(target, source.dtype, "gather_rows");
  ODC_CHECK(target.count >= rows.count * width, "gather_rows: {} rows of {} into {} elements", rows.count, width,
            target.count);
  cu::gather_rows(source.data, i32_in(rows, "gather_rows"), rows.count,
                  width * static_cast<std::int64_t>(dtype_size(source.dtype)), target.data, impl_->s());
}

void CudaBackend::scatter_rows(ConstView source, ConstView rows, std::int64_t width, View target) {
  check_view(source, target.dtype, "scatter_rows");
  check_view(target, source.dtype, "scatter_rows");
  ODC_CHECK(source.count >= rows.count * width, "scatter_rows: {} rows of {} from {} elements", rows.count, width,
            source.count);
  cu::scatter_rows(source.data, i32_in(rows, "scatter_rows"), rows.count,
                   width * static_cast<std::int64_t>(dtype_size(source.dtype)), target.data, impl_->s());
}

void CudaBackend::prepare_microbatch(const AttentionShape& shape) {
  // The attention reads its sequence bounds on the host: they must be there for every call.
  ODC_CHECK(shape.tokens == 0 || static_cast<int>(shape.host_cu_seqlens.size()) == shape.num_seqs + 1,
            "the CUDA backend needs the host cu_seqlens of the microbatch ({} sequences, {} bounds given)",
            shape.num_seqs, shape.host_cu_seqlens.size());
  // With key segments the tables also need their host bounds (attention_shape checks them).
  // The tile tables of every layer's attention, forward and backward: built and uploaded (pinned,
  // asynchronous) once here.
  if (shape.tokens > 0 || shape.key_tokens > 0) {
    impl_->attention_plan.build(attention_shape(shape), impl_->allocator, impl_->s());
  }
}

std::int64_t CudaBackend::memory_capacity(int ranks_on_host) {
  // Ranks take devices round-robin by local rank: ceil(ranks / devices) share one.
  const int devices = std::max(cu::device_count(nullptr), 1);
  const int sharing = std::max((ranks_on_host + devices - 1) / devices, 1);
  return cu::device_total_memory(impl_->device) / sharing;
}

std::int64_t CudaBackend::allocator_peak_bytes() {
  return static_cast<std::int64_t>(impl_->allocator.stats().peak_in_use);
}

std::int64_t CudaBackend::head_chunk_rows(std::int64_t vocab) const {
  return head_chunk_rows_of(DeviceKind::cuda, vocab);
}

void CudaBackend::resolve_loss(LossSums& sums) {
  double host[2] = {0.0, 0.0};
  const View pending = impl_->loss_sums.get(2);
  cu::copy_to_host_async(host, pending.data, sizeof(host), impl_->s());
  impl_->stream.synchronize();
  sums.weighted += host[0];
  sums.nll += host[1];
  cu::memset_async(pending.data, 0, sizeof(host), impl_->s());
}

double CudaBackend::sum_of_squares(ConstView x) {
  const float* data = f32_in(x, "sum_of_squares");
  const std::int64_t partials = cu::sum_of_squares_scratch();
  const View scratch = impl_->reduce.get(partials + 1);
  double* base = static_cast<double*>(scratch.data);
  cu::sum_of_squares(data, x.count, base, base + partials, impl_->s());
  double result = 0.0;
  cu::copy_to_host_async(&result, base + partials, sizeof(double), impl_->s());
  impl_->stream.synchronize();
  return result;
}

void CudaBackend::adamw_step(std::span<const AdamWSegment> segments, const kernels::AdamWParams& params) {
  std::vector<cu::AdamWSegment> device_segments;
  device_segments.reserve(segments.size());
  for (const auto& s : segments) {
    ODC_CHECK(s.grad.count == s.param.count && s.exp_avg.count == s.param.count && s.exp_avg_sq.count == s.param.count,
              "adamw_step: a segment's param/grad/moments differ in length ({}, {}, {}, {})", s.param.count,
              s.grad.count, s.exp_avg.count, s.exp_avg_sq.count);
    if (s.param.count == 0) continue;
    device_segments.push_back({f32_out(s.param, "adamw_step"), f32_in(s.grad, "adamw_step"),
                               f32_out(s.exp_avg, "adamw_step"), f32_out(s.exp_avg_sq, "adamw_step"), s.param.count,
                               s.weight_decay});
  }
  if (!device_segments.empty()) cu::adamw_step_multi(device_segments, params, impl_->s());
}

}  // namespace odc::backend
