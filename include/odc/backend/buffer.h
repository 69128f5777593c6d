#pragma once
// Device-tagged memory of a compute backend, as the model holds it.
//
//   View / ConstView  a non-owning window: `count` elements of `dtype` at `data` in `device`
//                     memory. Backend ops take views and check that their dtype and device are
//                     what the op expects, so a host pointer never reaches a GPU kernel (or a
//                     bf16 buffer an fp32 one) unnoticed.
//   Buffer            an owning, growable block (activations, scratch): get(n) returns a view of
//                     n elements, reallocating only when n exceeds the capacity, so a loop over
//                     microbatches of varying size reaches a steady state and allocates nothing.
//   DeviceMemory      where a backend allocates: host memory, or a GPU's.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "odc/core/dtype.h"

namespace odc::backend {

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual Device device() const = 0;
  // Zero-filled, aligned to at least 64 bytes; odc::Error when out of memory.
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* data, std::size_t bytes) noexcept = 0;
};

struct ConstView;

struct View {
  void* data = nullptr;  // null: "no buffer" where an op's argument is optional
  DType dtype = DType::f32;
  Device device = Device::cpu();
  std::int64_t count = 0;

  bool empty() const { return data == nullptr; }
  // Elements [offset, offset + n) of this view (checked).
  View at(std::int64_t offset, std::int64_t n) const;
};

struct ConstView {
  const void* data = nullptr;
  DType dtype = DType::f32;
  Device device = Device::cpu();
  std::int64_t count = 0;

  ConstView() = default;
  ConstView(const void* d, DType t, Device v, std::int64_t n) : data(d), dtype(t), device(v), count(n) {}
  ConstView(const View& v) : data(v.data), dtype(v.dtype), device(v.device), count(v.count) {}  // NOLINT: widening
  bool empty() const { return data == nullptr; }
  ConstView at(std::int64_t offset, std::int64_t n) const;
};

// Returns a Buffer's block to the memory it came from.
struct BufferRelease {
  DeviceMemory* memory = nullptr;
  std::size_t bytes = 0;
  void operator()(void* data) const noexcept {
    if (memory != nullptr) memory->deallocate(data, bytes);
  }
};

class Buffer {
 public:
  Buffer(DeviceMemory& memory, DType dtype) : memory_(&memory), dtype_(dtype) {}
  Buffer(Buffer&&) noexcept = default;
  Buffer& operator=(Buffer&&) noexcept = default;

  // A view of `count` elements; grows the block (zero-filled, earlier contents dropped) when needed.
  View get(std::int64_t count);
  std::int64_t capacity_bytes() const { return static_cast<std::int64_t>(bytes_); }
  DType dtype() const { return dtype_; }

 private:
  DeviceMemory* memory_;  // the backend's; outlives its buffers
  DType dtype_;
  std::size_t bytes_ = 0;
  std::unique_ptr<void, BufferRelease> data_;
};

}  // namespace odc::backend
