#pragma once
// Emulated build only (tests/emu): stands in for the toolkit's cuda_runtime.h. Device memory is
// host memory, tracked as the driver tracks it (memory_emu.h: cudaMalloc, pinned memory, memory
// pools with their attributes, an optional capacity), every stream is the host thread in
// program order (async copies and launches complete before they return), events complete at
// once and time nothing. Launches report their errors by throwing odc::Error; cudaGetLastError
// then has nothing left to report.
#include <cstddef>
#include <limits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#include "../bf16_emu.h"
#include "../cuda_emu.h"
#include "../ptx_emu.h"
#include "../memory_emu.h"

enum cudaError_t : int {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorNotReady = 600,
};
enum cudaMemcpyKind : int {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};
enum cudaFuncAttribute : int { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
enum cudaDataType_t : int { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 };

struct CUevent_st {};
using cudaEvent_t = CUevent_st*;
constexpr unsigned cudaStreamNonBlocking = 1;
constexpr unsigned cudaEventDefault = 0;
constexpr unsigned cudaEventDisableTiming = 2;

inline const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorNotReady: return "device not ready";
  }
  return "unknown error";
}
inline const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorNotReady: return "cudaErrorNotReady";
  }
  return "cudaErrorUnknown";
}
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline cudaError_t cudaPeekAtLastError() { return cudaSuccess; }
inline cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
inline cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : cudaErrorInvalidValue; }
// The emulated device's capacity (DeviceCapacity; unlimited: 80 GiB) and what is not allocated of it.
inline cudaError_t cudaMemGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) {
  const auto& device = ::odc_emu::memory::device();
  const std::size_t capacity = device.capacity() == std::numeric_limits<std::size_t>::max() ? std::size_t{80} << 30
                                                                                             : device.capacity();
  *total_bytes = capacity;
  *free_bytes = capacity > device.device_bytes() ? capacity - device.device_bytes() : 0;
  return cudaSuccess;
}

// ---- Memory (memory_emu.h): device, pinned and pool allocations are tracked host memory ----
inline cudaError_t cudaMalloc(void** p, std::size_t bytes) {
  return static_cast<cudaError_t>(::odc_emu::memory::device().malloc_device(p, bytes));
}
inline cudaError_t cudaFree(void* p) {
  return static_cast<cudaError_t>(::odc_emu::memory::device().free_device(p));
}
inline cudaError_t cudaMallocHost(void** p, std::size_t bytes) {
  return static_cast<cudaError_t>(::odc_emu::memory::device().malloc_pinned(p, bytes));
}
inline cudaError_t cudaHostAlloc(void** p, std::size_t bytes, unsigned) { return cudaMallocHost(p, bytes); }
inline cudaError_t cudaFreeHost(void* p) {
  return static_cast<cudaError_t>(::odc_emu::memory::device().free_pinned(p));
}

using cudaMemPool_t = ::odc_emu::memory::Pool*;
enum cudaMemPoolAttr : int {
  cudaMemPoolAttrReleaseThreshold = 4,
  cudaMemPoolAttrReservedMemCurrent = 5,
  cudaMemPoolAttrReservedMemHigh = 6,
  cudaMemPoolAttrUsedMemCurrent = 7,
  cudaMemPoolAttrUsedMemHigh = 8,
};
enum cudaMemAllocationType : int { cudaMemAllocationTypeInvalid = 0, cudaMemAllocationTypePinned = 1 };
enum cudaMemAllocationHandleType : int { cudaMemHandleTypeNone = 0 };
enum cudaMemLocationType : int { cudaMemLocationTypeInvalid = 0, cudaMemLocationTypeDevice = 1 };
struct cudaMemLocation {
  cudaMemLocationType type;
  int id;
};
struct cudaMemPoolProps {
  cudaMemAllocationType allocType;
  cudaMemAllocationHandleType handleTypes;
  cudaMemLocation location;
  void* win32SecurityAttributes;
  std::size_t maxSize;
  unsigned short usage;
  unsigned char reserved[54];
};

// Only pinned device pools on device 0 exist here.
inline cudaError_t cudaMemPoolCreate(cudaMemPool_t* pool, const cudaMemPoolProps* props) {
  if (pool == nullptr || props == nullptr || props->allocType != cudaMemAllocationTypePinned ||
      props->location.type != cudaMemLocationTypeDevice || props->location.id != 0) {
    return cudaErrorInvalidValue;
  }
  *pool = ::odc_emu::memory::device().create_pool(props->maxSize);
  return cudaSuccess;
}
inline cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool) {
  return static_cast<cudaError_t>(::odc_emu::memory::device().destroy_pool(pool));
}
inline cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  if (device != 0) return cudaErrorInvalidValue;
  *pool = ::odc_emu::memory::device().default_pool();
  return cudaSuccess;
}
inline cudaError_t cudaMallocFromPoolAsync(void** p, std::size_t bytes, cudaMemPool_t pool, cudaStream_t) {
  return static_cast<cudaError_t>(::odc_emu::memory::device().malloc_from_pool(p, bytes, pool));
}
inline cudaError_t cudaMallocAsync(void** p, std::size_t bytes, cudaStream_t stream = nullptr) {
  return cudaMallocFromPoolAsync(p, bytes, ::odc_emu::memory::device().default_pool(), stream);
}
inline cudaError_t cudaFreeAsync(void* p, cudaStream_t = nullptr) {
  return static_cast<cudaError_t>(::odc_emu::memory::device().free_async(p));
}
inline cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, std::size_t keep) {
  return static_cast<cudaError_t>(::odc_emu::memory::device().trim_to(pool, keep));
}
// Values are cuuint64_t for every attribute used here (the reuse policies are not emulated).
inline cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  return static_cast<cudaError_t>(::odc_emu::memory::device().get_attribute(
      pool, static_cast<::odc_emu::memory::PoolAttr>(attr), static_cast<std::uint64_t*>(value)));
}
inline cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  return static_cast<cudaError_t>(::odc_emu::memory::device().set_attribute(
      pool, static_cast<::odc_emu::memory::PoolAttr>(attr), static_cast<const std::uint64_t*>(value)));
}

inline cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind) {
  if (bytes > 0) std::memmove(dst, src, bytes);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind k,
                                   cudaStream_t = nullptr) {
  return cudaMemcpy(dst, src, bytes, k);
}
inline cudaError_t cudaMemsetAsync(void* dst, int value, std::size_t bytes, cudaStream_t = nullptr) {
  if (bytes > 0) std::memset(dst, value, bytes);
  return cudaSuccess;
}
inline cudaError_t cudaMemset(void* dst, int value, std::size_t bytes) {
  return cudaMemsetAsync(dst, value, bytes);
}

inline cudaError_t cudaDeviceSynchronize() {
  ::odc_emu::memory::device().synchronized();
  return cudaSuccess;
}
inline cudaError_t cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}

// A stream is a distinct non-null handle that owns nothing.
struct CUstream_st {};
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  *s = new CUstream_st;
  return cudaSuccess;
}
inline cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, 0); }
inline cudaError_t cudaStreamDestroy(cudaStream_t s) {
  delete s;
  return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaDeviceSynchronize(); }
inline cudaError_t cudaStreamQuery(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned = 0) { return cudaSuccess; }

inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) {
  *e = new CUevent_st;
  return cudaSuccess;
}
inline cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }
inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t = nullptr) { return cudaSuccess; }
inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaDeviceSynchronize(); }
inline cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t, cudaEvent_t) {
  *ms = 0.0f;
  return cudaSuccess;
}

template <typename... P>
cudaError_t cudaFuncSetAttribute(void (*kernel)(P...), cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0) return cudaErrorInvalidValue;
  ::odc_emu::set_max_dynamic_smem(reinterpret_cast<const void*>(kernel), static_cast<std::size_t>(value));
  return cudaSuccess;
}
