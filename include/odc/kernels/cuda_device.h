#pragma once
// CUDA device resources (built when the CUDA backend is enabled): error checking, a stream-ordered
// device allocator (a CUDA memory pool) with RAII buffers, pinned host buffers, and RAII streams
// and events. CUDA types are hidden behind void* so that host-only code (compiled without
// cuda_runtime.h) can include this header.
//
// There is no global mutable state: the caller owns its DeviceAllocator and passes it explicitly.
#include <cstddef>
#include <cstdint>
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

// ---- Stream-ordered allocator ----

struct AllocatorStats {
  std::size_t bytes_in_use = 0;    // sizes of live allocations, rounded by round_size()
  std::size_t bytes_cached = 0;    // held by the pool but not in use (bytes_reserved - pool's used)
  std::size_t peak_in_use = 0;     // maximum of bytes_in_use since construction / reset_peak()
  std::size_t bytes_reserved = 0;  // device memory the pool holds now
  std::size_t peak_reserved = 0;   // maximum of bytes_reserved since construction / reset_peak()
  std::size_t device_allocs = 0;   // allocations that made the pool reserve more device memory
  std::size_t cache_hits = 0;      // allocations served from memory the pool already held
};

// A CUDA memory pool of its own (cudaMemPoolCreate on the device current at the first
// allocation, device memory only, never managed memory) used through cudaMallocFromPoolAsync /
// cudaFreeAsync: allocation and release are ordered on the given stream, and the driver's pool
// splits and coalesces its memory, so ragged sizes (a different token count every microbatch)
// reuse the same reserve instead of fragmenting it. The release threshold is unlimited: freed
// memory stays in the pool across synchronizations until release_cached().
//
// Stream semantics (as with cudaMallocAsync): a block may be used on its allocation stream right
// away; using it on another stream needs that stream to wait (an Event) for the allocation, and
// that work must be ordered before the block's deallocation point on the allocation stream (the
// block returns to the pool in the allocation stream's order, then serves any stream). The stream
// must outlive the blocks allocated on it (if it is gone, deallocate falls back to cudaFree, which
// synchronizes the device). Thread-safe. Blocks still live at destruction are freed too: the
// allocator must outlive its buffers. When the pool cannot grow, the device is synchronized, the
// pool trimmed and the allocation retried once. Allocations are 256-byte aligned (pool blocks).
class DeviceAllocator {
 public:
  DeviceAllocator() = default;
  ~DeviceAllocator();
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  // bytes == 0 returns nullptr. Throws odc::Error when the device is out of memory.
  void* allocate(std::size_t bytes, void* stream = nullptr);
  // Returns a block obtained from allocate() to the pool, ordered on its allocation stream
  // (nullptr is ignored).
  void deallocate(void* ptr);
  // Releases the pool's unused memory to the device (cudaMemPoolTrimTo 0; live blocks stay, and
  // blocks whose release is still pending on a stream are released once it has run).
  void release_cached();

  AllocatorStats stats() const;
  void reset_peak();

  // The accounting granularity of bytes_in_use: multiples of 512 B (the pool itself rounds as the
  // driver sees fit; bytes_reserved is what it holds).
  static std::size_t round_size(std::size_t bytes);

 private:
  struct Block {
    std::size_t size;
    void* stream;
  };
  std::size_t reserved_locked() const;
  std::size_t used_locked() const;
  void refresh_locked();

  mutable std::mutex mutex_;
  void* pool_ = nullptr;  // cudaMemPool_t, created by the first allocation
  std::unordered_map<void*, Block> live_;
  AllocatorStats stats_;
};

// Page-locked host memory (cudaMallocHost), owned by value: the source of truly asynchronous
// host-to-device copies. Freeing it (destruction) must wait until no copy reads it any more; the
// owner makes sure of that (e.g. an Event recorded after the copy).
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(std::size_t bytes);
  ~PinnedBuffer() { reset(); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  PinnedBuffer(PinnedBuffer&& other) noexcept
      : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept {
    if (this != &other) {
      reset();
      ptr_ = std::exchange(other.ptr_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }

  void reset() noexcept;
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  std::size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

// A device allocation owned by value; returns its block to the allocator on destruction (ordered on
// its allocation stream).
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
