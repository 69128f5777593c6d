#include <cuda_runtime.h>

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
  constexpr std::size_t kSmallQuantum = 512;
  constexpr std::size_t kSmallLimit = std::size_t(1) << 20;
  constexpr std::size_t kLargeQuantum = std::size_t(2) << 20;
  if (bytes <= kSmallLimit) return (bytes + kSmallQuantum - 1) / kSmallQuantum * kSmallQuantum;
  return (bytes + kLargeQuantum - 1) / kLargeQuantum * kLargeQuantum;
}

DeviceAllocator::~DeviceAllocator() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_locked();
  for (auto& [ptr, block] : live_) cudaFree(ptr);
  live_.clear();
}

void* DeviceAllocator::allocate(std::size_t bytes, void* stream) {
  if (bytes == 0) return nullptr;
  const std::size_t size = round_size(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  void* ptr = nullptr;
  auto it = free_.find({size, stream});
  if (it != free_.end() && !it->second.empty()) {
    ptr = it->second.back();
    it->second.pop_back();
    stats_.bytes_cached -= size;
    ++stats_.cache_hits;
  } else {
    cudaError_t status = cudaMalloc(&ptr, size);
    if (status == cudaErrorMemoryAllocation && stats_.bytes_cached > 0) {
      (void)cudaGetLastError();
      release_cached_locked();
      status = cudaMalloc(&ptr, size);
    }
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      throw Error("cudaMalloc of " + std::to_string(size) + " bytes failed: " +
                  cudaGetErrorString(status) + " (in use " + std::to_string(stats_.bytes_in_use) +
                  " bytes, cached " + std::to_string(stats_.bytes_cached) + " bytes)");
    }
    ++stats_.device_allocs;
  }
  live_.emplace(ptr, Block{size, stream});
  stats_.bytes_in_use += size;
  if (stats_.bytes_in_use > stats_.peak_in_use) stats_.peak_in_use = stats_.bytes_in_use;
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
  stats_.bytes_cached += block.size;
  free_[{block.size, block.stream}].push_back(ptr);
}

void DeviceAllocator::release_cached_locked() {
  for (auto& [key, blocks] : free_) {
    for (void* ptr : blocks) cudaFree(ptr);
  }
  free_.clear();
  stats_.bytes_cached = 0;
}

void DeviceAllocator::release_cached() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_locked();
}

AllocatorStats DeviceAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void DeviceAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_in_use = stats_.bytes_in_use;
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
