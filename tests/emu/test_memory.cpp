// The emulated device memory (memory_emu.h) and the real DeviceAllocator / PinnedBuffer of
// device.cu on top of it: the pool keeps freed blocks, the allocator's statistics are the pool's
// numbers, release_cached trims, and an allocation the device cannot hold is retried once after
// trimming, as device.cu promises.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cuda_runtime.h>

#include "memory_emu.h"
#include "odc/core/error.h"
#include "odc/kernels/cuda_device.h"

namespace kc = odc::kernels::cuda;
namespace mem = odc_emu::memory;

TEST_CASE("emu memory: cudaFree / cudaFreeHost check what they free", "[emu][memory]") {
  void* d = nullptr;
  void* h = nullptr;
  REQUIRE(cudaMalloc(&d, 1000) == cudaSuccess);
  REQUIRE(cudaMallocHost(&h, 100) == cudaSuccess);
  CHECK(reinterpret_cast<std::uintptr_t>(d) % 256 == 0);
  CHECK(cudaFreeHost(d) == cudaErrorInvalidValue);  // device memory is not pinned host memory
  CHECK(cudaFree(h) == cudaErrorInvalidValue);
  CHECK(cudaFree(static_cast<char*>(d) + 16) == cudaErrorInvalidValue);  // not an allocation's start
  CHECK(cudaFree(d) == cudaSuccess);
  CHECK(cudaFree(d) == cudaErrorInvalidValue);  // double free
  CHECK(cudaFreeHost(h) == cudaSuccess);
  CHECK(cudaFree(nullptr) == cudaSuccess);
}

TEST_CASE("emu memory: a pool reuses freed blocks, reports reserve and use, trims, obeys its threshold",
          "[emu][memory]") {
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t pool = nullptr;
  REQUIRE(cudaMemPoolCreate(&pool, &props) == cudaSuccess);
  const auto attr = [&](cudaMemPoolAttr a) {
    std::uint64_t v = 0;
    REQUIRE(cudaMemPoolGetAttribute(pool, a, &v) == cudaSuccess);
    return v;
  };
  void* a = nullptr;
  void* b = nullptr;
  REQUIRE(cudaMallocFromPoolAsync(&a, 1000, pool, nullptr) == cudaSuccess);  // one 1024-byte block
  REQUIRE(cudaMallocFromPoolAsync(&b, 5000, pool, nullptr) == cudaSuccess);  // 5120
  CHECK(attr(cudaMemPoolAttrReservedMemCurrent) == 1024 + 5120);
  CHECK(attr(cudaMemPoolAttrUsedMemCurrent) == 1024 + 5120);
  REQUIRE(cudaFreeAsync(b, nullptr) == cudaSuccess);
  CHECK(attr(cudaMemPoolAttrUsedMemCurrent) == 1024);
  CHECK(attr(cudaMemPoolAttrReservedMemCurrent) == 1024 + 5120);  // kept for reuse
  void* c = nullptr;
  REQUIRE(cudaMallocFromPoolAsync(&c, 3000, pool, nullptr) == cudaSuccess);
  CHECK(c == b);  // served by the free 5120-byte block
  CHECK(attr(cudaMemPoolAttrUsedMemHigh) == 1024 + 5120);
  REQUIRE(cudaFreeAsync(c, nullptr) == cudaSuccess);
  // Threshold 0 (the default): a synchronization gives the free block back.
  REQUIRE(cudaStreamSynchronize(nullptr) == cudaSuccess);
  CHECK(attr(cudaMemPoolAttrReservedMemCurrent) == 1024);
  CHECK(attr(cudaMemPoolAttrReservedMemHigh) == 1024 + 5120);
  std::uint64_t keep = ~std::uint64_t(0);
  REQUIRE(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep) == cudaSuccess);
  REQUIRE(cudaFreeAsync(a, nullptr) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(attr(cudaMemPoolAttrReservedMemCurrent) == 1024);  // unlimited threshold: kept
  REQUIRE(cudaMemPoolTrimTo(pool, 0) == cudaSuccess);
  CHECK(attr(cudaMemPoolAttrReservedMemCurrent) == 0);
  REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);
  std::uint64_t v = 0;
  CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &v) == cudaErrorInvalidValue);
}

TEST_CASE("emu memory: DeviceAllocator statistics, release_cached, and the trim-and-retry on a full device",
          "[emu][memory]") {
  const std::size_t device_before = mem::device().device_bytes();
  {
    kc::DeviceAllocator allocator;
    kc::Stream stream;
    {
      kc::DeviceBuffer x(allocator, 100000, stream), y(allocator, 3000, stream);
      const kc::AllocatorStats st = allocator.stats();
      CHECK(st.bytes_in_use == kc::DeviceAllocator::round_size(100000) + kc::DeviceAllocator::round_size(3000));
      CHECK(st.device_allocs == 2);
      CHECK(st.bytes_reserved >= st.bytes_in_use);
      CHECK(st.bytes_cached == 0);
    }
    stream.synchronize();
    kc::AllocatorStats st = allocator.stats();
    CHECK(st.bytes_in_use == 0);
    CHECK(st.bytes_cached == st.bytes_reserved);  // the unlimited threshold keeps it
    CHECK(st.bytes_reserved > 100000);
    {
      kc::DeviceBuffer z(allocator, 90000, stream);  // fits the freed 100000-byte block
      CHECK(allocator.stats().cache_hits == 1);
      CHECK(allocator.stats().device_allocs == 2);
    }
    allocator.release_cached();
    st = allocator.stats();
    CHECK(st.bytes_reserved == 0);
    CHECK(st.peak_in_use == kc::DeviceAllocator::round_size(100000) + kc::DeviceAllocator::round_size(3000));

    // A device of 300 KB: 200 KB cached in the pool leave no room for 150 KB until the allocator
    // trims its pool and retries; an allocation beyond the device fails with a clear error.
    {
      kc::DeviceBuffer big(allocator, 200000, stream);
    }
    CHECK(allocator.stats().bytes_cached >= 200000);
    const mem::DeviceCapacity capacity(mem::device().device_bytes() + 100000);
    {
      kc::DeviceBuffer other(allocator, 250000, stream);  // needs the cached 200 KB released first
      CHECK(other.get() != nullptr);
      CHECK(allocator.stats().bytes_reserved < 300000);
    }
    CHECK_THROWS_WITH(kc::DeviceBuffer(allocator, 10000000, stream),
                      Catch::Contains("device allocation of 10000000 bytes failed"));
  }
  CHECK(mem::device().device_bytes() == device_before);  // the pool went away with the allocator
}

TEST_CASE("emu memory: PinnedBuffer owns page-locked memory", "[emu][memory]") {
  const std::size_t before = mem::device().live_pinned_allocations();
  {
    kc::PinnedBuffer p(4096);
    CHECK(p.get() != nullptr);
    CHECK(mem::device().live_pinned_allocations() == before + 1);
    kc::PinnedBuffer q = std::move(p);
    CHECK(p.get() == nullptr);
    CHECK(q.bytes() == 4096);
  }
  CHECK(mem::device().live_pinned_allocations() == before);
}
