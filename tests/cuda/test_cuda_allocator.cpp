// The stream-ordered DeviceAllocator (a CUDA memory pool): accounting, reuse, release, and what the
// pool does under ragged sizes (a different token count every microbatch): measured and printed
// (reserved against in use, microbatch by microbatch), with only the allocator's contract
// (include/odc/kernels/cuda_device.h) asserted.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <random>
#include <utility>
#include <vector>

#include "odc/kernels/cuda_device.h"

namespace cu = odc::kernels::cuda;

TEST_CASE("DeviceAllocator: accounting, reuse, release", "[cuda][allocator]") {
  CHECK(cu::DeviceAllocator::round_size(1) == 512);
  CHECK(cu::DeviceAllocator::round_size(512) == 512);
  CHECK(cu::DeviceAllocator::round_size(513) == 1024);
  CHECK(cu::DeviceAllocator::round_size((std::size_t(3) << 20) + 1) == (std::size_t(3) << 20) + 512);

  cu::DeviceAllocator alloc;
  CHECK(alloc.stats().bytes_reserved == 0);  // the pool is created by the first allocation
  {
    cu::DeviceBuffer a(alloc, 1000);
    REQUIRE(a);
    CHECK(reinterpret_cast<std::uintptr_t>(a.get()) % 256 == 0);
    const auto s = alloc.stats();
    CHECK(s.bytes_in_use == 1024);
    CHECK(s.device_allocs == 1);
    CHECK(s.cache_hits == 0);
    CHECK(s.bytes_reserved >= 1024);
    CHECK(s.peak_reserved == s.bytes_reserved);
  }
  cu::device_synchronize();  // the release is ordered on the (legacy) stream
  auto s = alloc.stats();
  CHECK(s.bytes_in_use == 0);
  CHECK(s.peak_in_use == 1024);
  CHECK(s.bytes_cached == s.bytes_reserved);  // kept by the pool (unlimited release threshold)
  {
    cu::DeviceBuffer b(alloc, 600);  // served from the pool's reserve
    s = alloc.stats();
    CHECK(s.cache_hits == 1);
    CHECK(s.device_allocs == 1);
    cu::DeviceBuffer c(alloc, 3u << 20);
    s = alloc.stats();
    CHECK(s.bytes_in_use == 1024 + (std::size_t(3) << 20));
    CHECK(s.peak_in_use == 1024 + (std::size_t(3) << 20));
    cu::DeviceBuffer moved = std::move(c);  // moving keeps one owner
    CHECK_FALSE(c);
    CHECK(moved.bytes() == (3u << 20));
    CHECK(alloc.stats().bytes_in_use == 1024 + (std::size_t(3) << 20));
  }
  {
    // A block released on one stream serves another stream afterwards.
    cu::Stream first, second;
    { cu::DeviceBuffer d(alloc, 1u << 20, first); }
    first.synchronize();
    cu::DeviceBuffer e(alloc, 1u << 20, second);
    CHECK(e);
    cu::memset_async(e.get(), 0, e.bytes(), second.handle());
    second.synchronize();
  }
  cu::device_synchronize();
  CHECK(alloc.stats().bytes_in_use == 0);
  alloc.release_cached();
  s = alloc.stats();
  CHECK(s.bytes_reserved == 0);
  CHECK(s.bytes_cached == 0);
  alloc.reset_peak();
  CHECK(alloc.stats().peak_in_use == 0);
  CHECK(alloc.stats().peak_reserved == 0);
  CHECK(cu::DeviceBuffer(alloc, 0).get() == nullptr);
}

TEST_CASE("DeviceAllocator: ragged microbatches, measured against the contract",
          "[cuda][allocator][fragmentation]") {
  // 40 microbatches of 500..16384 tokens; per microbatch, 8 layers save two activations each
  // (hidden 2048 and MLP 5504, bf16) with an fp32 temporary in between, and the backward frees
  // them in reverse with a gradient temporary per step: the allocation pattern of training.
  //
  // Measured and printed, not asserted: how much the pool reserves for what is in use (its
  // splitting, coalescing and growth granularity are the driver's policy, which the contract does
  // not promise), beside what a cache of whole blocks in size classes (never split) would reserve
  // for the same sequence. Asserted, each exactly (tolerance 0), because the contract states it:
  //  * bytes_in_use is the sum of round_size() over the live buffers, and peak_in_use its maximum
  //    (the allocator's own accounting);
  //  * every allocation is counted once, as a pool growth or as served from the reserve;
  //  * the pool holds every live block: bytes_reserved >= the live buffers' requested bytes;
  //  * the release threshold is unlimited: freed memory stays in the pool, so bytes_reserved never
  //    decreases before release_cached() (no allocation here comes near the device's memory, so
  //    the out-of-memory retry, which trims, does not run), and peak_reserved is the last value;
  //  * with nothing live, all that is reserved is cached, and release_cached() returns it all.
  cu::DeviceAllocator alloc;
  cu::Stream stream;
  std::mt19937 rng(2718);
  std::uniform_int_distribution<std::int64_t> tokens_of(500, 16384);
  auto class_of = [](std::size_t b) {
    const std::size_t q = b <= (std::size_t(1) << 20) ? 512 : (std::size_t(2) << 20);
    return (b + q - 1) / q * q;
  };
  std::map<std::size_t, int> class_free;
  std::size_t class_reserved = 0;
  auto class_alloc = [&](std::size_t b) {
    int& n = class_free[class_of(b)];
    if (n > 0) {
      --n;
    } else {
      class_reserved += class_of(b);
    }
  };
  auto class_release = [&](std::size_t b) { ++class_free[class_of(b)]; };

  std::size_t live_rounded = 0, live_requested = 0, expected_peak = 0, allocations = 0;
  std::size_t last_reserved = 0, accounting_errors = 0, reserve_below_live = 0, reserve_shrinks = 0;
  // One allocation: the accounting checked against the test's own sums right after it.
  auto take = [&](std::size_t b) {
    cu::DeviceBuffer buffer(alloc, b, stream);
    ++allocations;
    live_rounded += cu::DeviceAllocator::round_size(b);
    live_requested += b;
    expected_peak = std::max(expected_peak, live_rounded);
    const auto s = alloc.stats();
    accounting_errors += s.bytes_in_use != live_rounded;
    reserve_below_live += s.bytes_reserved < live_requested;
    reserve_shrinks += s.bytes_reserved < last_reserved;
    last_reserved = s.bytes_reserved;
    return buffer;
  };
  auto give = [&](cu::DeviceBuffer& buffer) {
    live_rounded -= cu::DeviceAllocator::round_size(buffer.bytes());
    live_requested -= buffer.bytes();
    buffer.reset();
  };

  std::printf("[cuda] ragged microbatches: mb tokens, live peak MiB, reserved MiB, pool growths so far\n");
  for (int mb = 0; mb < 40; ++mb) {
    const std::int64_t t = tokens_of(rng);
    const std::size_t hidden = std::size_t(t) * 2048 * 2, mlp = std::size_t(t) * 5504 * 2;
    const std::size_t temp = std::size_t(t) * 2048 * 4 + 1000;
    std::vector<cu::DeviceBuffer> saved;
    for (int layer = 0; layer < 8; ++layer) {
      for (std::size_t b : {hidden, mlp}) {
        saved.push_back(take(b));
        class_alloc(b);
      }
      cu::DeviceBuffer tmp = take(temp);
      give(tmp);
      class_alloc(temp);
      class_release(temp);
    }
    const std::size_t mb_peak = live_rounded;
    while (!saved.empty()) {
      cu::DeviceBuffer grad = take(mlp);
      give(grad);
      class_alloc(mlp);
      class_release(mlp);
      class_release(saved.back().bytes());
      give(saved.back());
      saved.pop_back();
    }
    if (mb < 4 || mb % 8 == 7) {
      const auto s = alloc.stats();
      std::printf("[cuda]   mb %2d %6lld tokens: live %8.1f MiB, reserved %8.1f MiB, %zu growths\n", mb,
                  static_cast<long long>(t), mb_peak / 1048576.0, s.bytes_reserved / 1048576.0, s.device_allocs);
    }
  }
  stream.synchronize();
  const auto s = alloc.stats();
  std::printf("[cuda] ragged microbatches: peak in use %.1f MiB, peak reserved %.1f MiB (%.2fx in use; "
              "a never-splitting size-class cache: %.1f MiB, %.2fx), %zu pool growths of %zu allocations\n",
              s.peak_in_use / 1048576.0, s.peak_reserved / 1048576.0,
              static_cast<double>(s.peak_reserved) / static_cast<double>(s.peak_in_use), class_reserved / 1048576.0,
              static_cast<double>(class_reserved) / static_cast<double>(s.peak_in_use), s.device_allocs, allocations);
  CHECK(accounting_errors == 0);
  CHECK(s.peak_in_use == expected_peak);
  CHECK(s.device_allocs + s.cache_hits == allocations);
  CHECK(reserve_below_live == 0);
  CHECK(reserve_shrinks == 0);
  CHECK(s.peak_reserved == s.bytes_reserved);
  CHECK(s.bytes_in_use == 0);
  CHECK(s.bytes_cached == s.bytes_reserved);
  alloc.release_cached();
  CHECK(alloc.stats().bytes_reserved == 0);
}
