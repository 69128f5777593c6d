#pragma once
// CUDA device resources (built when the CUDA backend is enabled): error checking, a caching device
// allocator with RAII buffers, and RAII streams and events. CUDA types are hidden behind void* so
// that host-only code (compiled without cuda_runtime.h) can include this header.
//
// There is no global mutable state: the caller owns its DeviceAllocator and passes it explicitly.
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

namespace odc::kernels::cuda {

// Throws odc::Error naming `what` and cudaGetErrorString(status) unless status is cudaSuccess.
// `status` is a cudaError_t (an enum; passed as int to keep this header CUDA-free).
void check_cuda(int status, const char* what);
// check_cuda(cudaGetLastError(), what): reports a failed kernel launch.
void check_last_launch(const char* what);

// Device selection and whole-device synchronization (each call checked).
void set_device(int device);
void device_synchronize();

// ---- Stream / Event ----

class Event;

// A non-blocking CUDA stream (does not synchronize with the legacy default stream).
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  Stream(Stream&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  Stream& operator=(Stream&& other) noexcept;

  // The cudaStream_t, for the `void* stream` argument of the kernels.
  void* handle() const { return handle_; }
  void synchronize() const;
  // Work submitted to this stream after this call waits for `event` to complete.
  void wait(const Event& event) const;
  // True when all work submitted so far has completed.
  bool query() const;

 private:
  void* handle_ = nullptr;
};

class Event {
 public:
  // timing = false creates the event with cudaEventDisableTiming (cheaper for pure ordering).
  explicit Event(bool timing = false);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  Event(Event&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  Event& operator=(Event&& other) noexcept;

  void* handle() const { return handle_; }
  // Records on a raw stream (nullptr = legacy default stream) or a Stream.
  void record(void* stream);
  void record(const Stream& stream) { record(stream.handle()); }
  void synchronize() const;
  bool query() const;
  // Milliseconds between two recorded timing events (start.elapsed_ms(end)).
  float elapsed_ms(const Event& end) const;

 private:
  void* handle_ = nullptr;
};

// ---- Caching allocator ----

struct AllocatorStats {
  std::size_t bytes_in_use = 0;   // rounded sizes of live blocks
  std::size_t bytes_cached = 0;   // rounded sizes of freed blocks kept for reuse
  std::size_t peak_in_use = 0;    // maximum of bytes_in_use since construction / reset_peak()
  std::size_t device_allocs = 0;  // cudaMalloc calls that succeeded
  std::size_t cache_hits = 0;     // allocations served from the cache
};

// Size-class free lists over cudaMalloc (device memory only, never managed memory). A freed block
// goes back to the free list of its (size class, stream) and is reused only by allocations on the
// same stream, so stream order protects pending kernels that still read the block; using a block on
// another stream needs an explicit event wait by the caller (as with PyTorch's allocator).
// Thread-safe. Blocks still live at destruction are freed too: the allocator must outlive its
// buffers. When cudaMalloc fails, the cache is released and the allocation retried once.
class DeviceAllocator {
 public:
  DeviceAllocator() = default;
  ~DeviceAllocator();
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  // bytes == 0 returns nullptr. Throws odc::Error when the device is out of memory.
  void* allocate(std::size_t bytes, void* stream = nullptr);
  // Returns a block obtained from allocate() to the cache (nullptr is ignored).
  void deallocate(void* ptr);
  // cudaFree of every cached block (live blocks are untouched).
  void release_cached();

  AllocatorStats stats() const;
  void reset_peak();

  // Size classes: multiples of 512 B up to 1 MiB, multiples of 2 MiB above.
  static std::size_t round_size(std::size_t bytes);

 private:
  struct Block {
    std::size_t size;
    void* stream;
  };
  void release_cached_locked();

  mutable std::mutex mutex_;
  std::map<std::pair<std::size_t, void*>, std::vector<void*>> free_;  // (size, stream) -> blocks
  std::unordered_map<void*, Block> live_;
  AllocatorStats stats_;
};

// A device allocation owned by value; returns its block to the allocator on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceAllocator& allocator, std::size_t bytes, void* stream = nullptr)
      : allocator_(&allocator), ptr_(allocator.allocate(bytes, stream)), bytes_(bytes) {}
  DeviceBuffer(DeviceAllocator& allocator, std::size_t bytes, const Stream& stream)
      : DeviceBuffer(allocator, bytes, stream.handle()) {}
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : allocator_(std::exchange(other.allocator_, nullptr)),
        ptr_(std::exchange(other.ptr_, nullptr)),
        bytes_(std::exchange(other.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      reset();
      allocator_ = std::exchange(other.allocator_, nullptr);
      ptr_ = std::exchange(other.ptr_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }

  void reset() noexcept {
    if (allocator_ != nullptr && ptr_ != nullptr) allocator_->deallocate(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }

  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  std::size_t bytes() const { return bytes_; }
  explicit operator bool() const { return ptr_ != nullptr; }

 private:
  DeviceAllocator* allocator_ = nullptr;
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

// ---- Copies (checked). stream == nullptr is the legacy default stream. ----

// Synchronous copies (complete on return).
void copy_to_device(void* dst, const void* src, std::size_t bytes);
void copy_to_host(void* dst, const void* src, std::size_t bytes);
// Stream-ordered copies and memset. Host memory should be pinned for true asynchrony.
void copy_to_device_async(void* dst, const void* src, std::size_t bytes, void* stream);
void copy_to_host_async(void* dst, const void* src, std::size_t bytes, void* stream);
void copy_device_async(void* dst, const void* src, std::size_t bytes, void* stream);
void memset_async(void* dst, int value, std::size_t bytes, void* stream);

// Typed conveniences over the synchronous copies.
template <typename T>
void upload(void* dst, const std::vector<T>& src) {
  copy_to_device(dst, src.data(), src.size() * sizeof(T));
}
template <typename T>
std::vector<T> download(const void* src, std::size_t count) {
  std::vector<T> out(count);
  copy_to_host(out.data(), src, count * sizeof(T));
  return out;
}

}  // namespace odc::kernels::cuda
