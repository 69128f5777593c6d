#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "odc/core/error.h"
#include "odc/kernels/cuda_device.h"

namespace odc::kernels::cuda {

void check_cuda(int status, const char* what) {
  if (status == static_cast<int>(cudaSuccess)) return;
  const auto error = static_cast<cudaError_t>(status);
  throw Error(std::string("CUDA call ") + what + " failed: " + cudaGetErrorName(error) + " (" +
              cudaGetErrorString(error) + ")");
}

void check_last_launch(const char* what) { check_cuda(cudaGetLastError(), what); }

void set_device(int device) { check_cuda(cudaSetDevice(device), "cudaSetDevice"); }

void device_synchronize() { check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

// ---- Stream ----

Stream::Stream() {
  cudaStream_t stream = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  handle_ = stream;
}

Stream::~Stream() {
  if (handle_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(handle_));
}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(handle_));
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

void Stream::synchronize() const {
  check_cuda(cudaStreamSynchronize(static_cast<cudaStream_t>(handle_)), "cudaStreamSynchronize");
}

void Stream::wait(const Event& event) const {
  check_cuda(cudaStreamWaitEvent(static_cast<cudaStream_t>(handle_),
                                 static_cast<cudaEvent_t>(event.handle()), 0),
             "cudaStreamWaitEvent");
}

bool Stream::query() const {
  const cudaError_t status = cudaStreamQuery(static_cast<cudaStream_t>(handle_));
  if (status == cudaErrorNotReady) {
    (void)cudaGetLastError();  // not a sticky error; clear it
    return false;
  }
  check_cuda(status, "cudaStreamQuery");
  return true;
}

// ---- Event ----

Event::Event(bool timing) {
  cudaEvent_t event = nullptr;
  check_cuda(cudaEventCreateWithFlags(&event, timing ? cudaEventDefault : cudaEventDisableTiming),
             "cudaEventCreateWithFlags");
  handle_ = event;
}

Event::~Event() {
  if (handle_ != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(handle_));
}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(handle_));
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

void Event::record(void* stream) {
  check_cuda(cudaEventRecord(static_cast<cudaEvent_t>(handle_), static_cast<cudaStream_t>(stream)),
             "cudaEventRecord");
}

void Event::synchronize() const {
  check_cuda(cudaEventSynchronize(static_cast<cudaEvent_t>(handle_)), "cudaEventSynchronize");
}

bool Event::query() const {
  const cudaError_t status = cudaEventQuery(static_cast<cudaEvent_t>(handle_));
  if (status == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  check_cuda(status, "cudaEventQuery");
  return true;
}

float Event::elapsed_ms(const Event& end) const {
  float ms = 0.0f;
  check_cuda(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(handle_),
                                  static_cast<cudaEvent_t>(end.handle_)),
             "cudaEventElapsedTime");
  return ms;
}

// ---- DeviceAllocator ----

std::size_t DeviceAllocator::round_size(std::size_t bytes) {
  constexpr std::size_t kQuantum = 512;
  return (bytes + kQuantum - 1) / kQuantum * kQuantum;
}

DeviceAllocator::~DeviceAllocator() {
  std::lock_guard<std::mutex> lock(mutex_);
  // Live blocks here are a caller bug (a buffer outliving its allocator); cudaFree synchronizes,
  // so whatever still reads them has finished.
  for (auto& [ptr, block] : live_) cudaFree(ptr);
  live_.clear();
  if (pool_ != nullptr) cudaMemPoolDestroy(static_cast<cudaMemPool_t>(pool_));
}

std::size_t DeviceAllocator::reserved_locked() const {
  if (pool_ == nullptr) return 0;
  std::uint64_t value = 0;
  check_cuda(cudaMemPoolGetAttribute(static_cast<cudaMemPool_t>(pool_),
                                     cudaMemPoolAttrReservedMemCurrent, &value),
             "cudaMemPoolGetAttribute(ReservedMemCurrent)");
  return static_cast<std::size_t>(value);
}

std::size_t DeviceAllocator::used_locked() const {
  if (pool_ == nullptr) return 0;
  std::uint64_t value = 0;
  check_cuda(cudaMemPoolGetAttribute(static_cast<cudaMemPool_t>(pool_),
                                     cudaMemPoolAttrUsedMemCurrent, &value),
             "cudaMemPoolGetAttribute(UsedMemCurrent)");
  return static_cast<std::size_t>(value);
}

void DeviceAllocator::refresh_locked() {
  stats_.bytes_reserved = reserved_locked();
  stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.bytes_reserved);
  const std::size_t used = used_locked();
  stats_.bytes_cached = stats_.bytes_reserved > used ? stats_.bytes_reserved - used : 0;
}

void* DeviceAllocator::allocate(std::size_t bytes, void* stream) {
  if (bytes == 0) return nullptr;
  const std::size_t size = round_size(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  if (pool_ == nullptr) {
    int device = 0;
    check_cuda(cudaGetDevice(&device), "cudaGetDevice");
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    cudaMemPool_t pool = nullptr;
    check_cuda(cudaMemPoolCreate(&pool, &props), "cudaMemPoolCreate");
    pool_ = pool;
    std::uint64_t threshold = ~std::uint64_t(0);  // keep freed memory across synchronizations
    check_cuda(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold),
               "cudaMemPoolSetAttribute(ReleaseThreshold)");
  }
  const auto pool = static_cast<cudaMemPool_t>(pool_);
  const auto s = static_cast<cudaStream_t>(stream);
  const std::size_t reserved_before = reserved_locked();
  void* ptr = nullptr;
  cudaError_t status = cudaMallocFromPoolAsync(&ptr, bytes, pool, s);
  if (status == cudaErrorMemoryAllocation) {
    // Pending releases on other streams and memory held by the pool: give it all back, retry.
    (void)cudaGetLastError();
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (allocator retry)");
    check_cuda(cudaMemPoolTrimTo(pool, 0), "cudaMemPoolTrimTo");
    status = cudaMallocFromPoolAsync(&ptr, bytes, pool, s);
  }
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    throw Error("device allocation of " + std::to_string(bytes) + " bytes failed: " +
                cudaGetErrorString(status) + " (in use " + std::to_string(stats_.bytes_in_use) +
                " bytes, pool reserve " + std::to_string(reserved_locked()) + " bytes)");
  }
  live_.emplace(ptr, Block{size, stream});
  stats_.bytes_in_use += size;
  stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.bytes_in_use);
  refresh_locked();
  if (stats_.bytes_reserved > reserved_before) {
    ++stats_.device_allocs;
  } else {
    ++stats_.cache_hits;
  }
  return ptr;
}

void DeviceAllocator::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(ptr);
  if (it == live_.end()) {
    // Not ours: a bug in the caller. Leaking is safer than freeing foreign memory; deallocate is
    // called from destructors, so it does not throw.
    return;
  }
  const Block block = it->second;
  live_.erase(it);
  stats_.bytes_in_use -= block.size;
  if (cudaFreeAsync(ptr, static_cast<cudaStream_t>(block.stream)) != cudaSuccess) {
    (void)cudaGetLastError();  // e.g. the stream is gone: free synchronously instead
    (void)cudaFree(ptr);
    (void)cudaGetLastError();
  }
}

void DeviceAllocator::release_cached() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (pool_ == nullptr) return;
  check_cuda(cudaMemPoolTrimTo(static_cast<cudaMemPool_t>(pool_), 0), "cudaMemPoolTrimTo");
  refresh_locked();
}

AllocatorStats DeviceAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  // Releases pending on streams change the pool's figures without a call here: read them now.
  AllocatorStats out = stats_;
  out.bytes_reserved = reserved_locked();
  const std::size_t used = used_locked();
  out.bytes_cached = out.bytes_reserved > used ? out.bytes_reserved - used : 0;
  return out;
}

void DeviceAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_in_use = stats_.bytes_in_use;
  stats_.peak_reserved = reserved_locked();
}

// ---- PinnedBuffer ----

PinnedBuffer::PinnedBuffer(std::size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  check_cuda(cudaMallocHost(&ptr_, bytes), "cudaMallocHost");
}

void PinnedBuffer::reset() noexcept {
  if (ptr_ != nullptr) cudaFreeHost(ptr_);
  ptr_ = nullptr;
  bytes_ = 0;
}

// ---- Copies ----

void copy_to_device(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  check_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy(HostToDevice)");
}

void copy_to_host(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  check_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy(DeviceToHost)");
}

void copy_to_device_async(void* dst, const void* src, std::size_t bytes, void* stream) {
  if (bytes == 0) return;
  check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice,
                             static_cast<cudaStream_t>(stream)),
             "cudaMemcpyAsync(HostToDevice)");
}

void copy_to_host_async(void* dst, const void* src, std::size_t bytes, void* stream) {
  if (bytes == 0) return;
  check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost,
                             static_cast<cudaStream_t>(stream)),
             "cudaMemcpyAsync(DeviceToHost)");
}

void copy_device_async(void* dst, const void* src, std::size_t bytes, void* stream) {
  if (bytes == 0) return;
  check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                             static_cast<cudaStream_t>(stream)),
             "cudaMemcpyAsync(DeviceToDevice)");
}

void memset_async(void* dst, int value, std::size_t bytes, void* stream) {
  if (bytes == 0) return;
  check_cuda(cudaMemsetAsync(dst, value, bytes, static_cast<cudaStream_t>(stream)),
             "cudaMemsetAsync");
}

}  // namespace odc::kernels::cuda
