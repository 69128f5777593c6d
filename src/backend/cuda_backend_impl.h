#pragma once
// CudaBackend's state and view checks, shared by its two source files (backend-internal).
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "odc/backend/cuda_backend.h"
#include "odc/backend/weight_copies.h"
#include "odc/core/error.h"
#include "odc/kernels/attention_choice.h"
#include "odc/kernels/cuda_attention.h"
#include "odc/kernels/cuda_attention_cache.h"
#include "odc/kernels/cuda_cudnn_attention.h"
#include "odc/kernels/cuda_device.h"
#include "odc/kernels/cuda_gemm.h"

namespace odc::backend {

// Device memory over the caching allocator, on the backend's stream: zero-filled in stream order.
class CudaMemory final : public DeviceMemory {
 public:
  CudaMemory(int device, kernels::cuda::DeviceAllocator& allocator, const kernels::cuda::Stream& stream)
      : device_(device), allocator_(allocator), stream_(stream) {}
  Device device() const override { return Device::cuda(device_); }
  void* allocate(std::size_t bytes) override;
  void deallocate(void* data, std::size_t bytes) noexcept override;

 private:
  int device_;
  kernels::cuda::DeviceAllocator& allocator_;
  const kernels::cuda::Stream& stream_;
};

// Host data the ops read (Backend::upload), staged through page-locked memory so that the copies
// are asynchronous: from pageable memory cudaMemcpyAsync first waits for the stream's queued work,
// so every upload would stall the host behind the device. Two grow-only arenas are filled front to
// back in turn; an arena is reused only after the event recorded behind its last copy (by then
// the other arena has been filled: a copy is long done when its bytes are overwritten).
class PinnedStaging {
 public:
  static constexpr std::size_t kInitialBytes = std::size_t{4} << 20;
  // Copies `bytes` of `host` into an arena and returns the page-locked copy, the source of the
  // caller's asynchronous copy on `stream`; record() must follow that copy.
  void* stage(const void* host, std::size_t bytes);
  void record(const kernels::cuda::Stream& stream);

 private:
  struct Arena {
    kernels::cuda::PinnedBuffer memory;
    std::size_t used = 0;
    kernels::cuda::Event copied;  // behind the arena's last copy
    bool pending = false;
  };
  Arena arenas_[2];
  int current_ = 0;
};

struct CudaBackend::Impl {
  explicit Impl(int device_index);
  ~Impl();

  int device;
  kernels::cuda::Stream stream;  // declared before the allocator: the allocator frees on it
  kernels::cuda::DeviceAllocator allocator;
  CudaMemory memory;
  kernels::cuda::Blas blas;
  // bf16 compute copies of the units handed to weights(), until release_weights().
  WeightCopies<Buffer> live_weights;
  Buffer loss_sums;    // f64 [2]: weighted, nll (pending until resolve_loss)
  Buffer row_loss;     // f64 per row of a cross-entropy chunk
  Buffer chunk_nll;    // f32 per row, where the caller passes no nll view
  Buffer reduce;       // f64: sum_of_squares partials and result
  Buffer policy_sums;      // f64 [kPolicySumFields]: pending policy sums (until resolve_policy)
  Buffer policy_partials;  // f64: policy_coefficients' per-block partials
  Buffer inv_freq;     // f64 RoPE inverse frequencies on the device
  PinnedStaging staging;  // the uploads' page-locked sources
  // Batched decoding's table of the sequences' caches: built on the host per call, uploaded into
  // decode_table (i32 words) through the staging.
  std::vector<kernels::cuda::DecodeBatchEntry> decode_entries;
  Buffer decode_table;
  std::vector<double> inv_freq_host;  // what inv_freq holds
  // The attention's tile tables of the current microbatch, built once in prepare_microbatch and
  // used by every layer's forward and backward.
  kernels::cuda::AttentionPlan attention_plan;
  // model.attention and what it settled for the model's head shape (cuda_backend_attention.cpp);
  // cuDNN's graphs and tables, created with the first cuDNN selection.
  kernels::AttentionMode attention_mode = kernels::AttentionMode::native;
  std::int64_t cudnn_workspace_bytes = 0;  // model.cudnn_workspace_mib
  struct AttentionSelection {
    int n_heads = 0, n_kv_heads = 0, head_dim = 0;
    kernels::AttentionChoice choice;
  };
  std::optional<AttentionSelection> attention_selection;
  std::unique_ptr<kernels::cuda::CudnnAttention> cudnn_attention;
  const kernels::AttentionChoice& select_attention(int n_heads, int n_kv_heads, int head_dim);
  // Whether cuDNN runs the attention of this shape (selecting on its first call).
  bool use_cudnn(const kernels::cuda::CudaAttentionShape& s);
  // A cuDNN failure in `what`: rethrown under model.attention=cudnn; under auto, logged and the
  // native kernels selected for the rest of the run.
  void cudnn_failed(const Error& error, const char* what);
  // A cuDNN call refused for its workspace (the native kernels run it): logged once per process.
  void cudnn_declined() const;

  void* s() const { return stream.handle(); }
  // `count` elements of `target` filled from `bytes` of host data, through the pinned staging.
  View upload(const void* host, std::size_t bytes, std::int64_t count, Buffer& target);
};

// The kernels' attention shape (host bounds) of the model's.
kernels::cuda::CudaAttentionShape attention_shape(const AttentionShape& s);

// ---- view checks: device memory of this backend, of the element type the kernel takes ----

void check_view(const ConstView& v, DType dtype, const char* what);

inline const std::uint16_t* bf16_in(ConstView v, const char* what) {
  check_view(v, DType::bf16, what);
  return static_cast<const std::uint16_t*>(v.data);
}
inline std::uint16_t* bf16_out(View v, const char* what) { return const_cast<std::uint16_t*>(bf16_in(v, what)); }
inline const float* f32_in(ConstView v, const char* what) {
  check_view(v, DType::f32, what);
  return static_cast<const float*>(v.data);
}
inline float* f32_out(View v, const char* what) { return const_cast<float*>(f32_in(v, what)); }
inline const std::int32_t* i32_in(ConstView v, const char* what) {
  check_view(v, DType::i32, what);
  return static_cast<const std::int32_t*>(v.data);
}

}  // namespace odc::backend
