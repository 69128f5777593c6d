// The emulator's own semantics, on small kernels written here: bf16 rounding, barriers that
// order shared memory, warp shuffles, cp.async poisoning and zero-fill, and the synchronization
// errors that must be reported (never a hang): a thread that exits before a barrier, a warp
// whose lanes diverge, a mask without the calling lane, too much dynamic shared memory.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cuda_runtime.h"  // the emulated runtime (tests/emu/include)
#include "emu_test_support.h"

namespace {

__global__ void rotate_through_shared(const int* in, int* out) {
  int* s = ::odc_emu::dynamic_shared<int>();
  const int n = static_cast<int>(blockDim.x);
  const int t = static_cast<int>(threadIdx.x);
  s[t] = in[blockIdx.x * n + t];
  __syncthreads();
  out[blockIdx.x * n + t] = s[(t + 1) % n];
}

__global__ void exit_before_barrier(int* out) {
  if (threadIdx.x == 5) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

__global__ void warp_sums(const float* in, float* out) {
  float v = in[threadIdx.x];
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  out[threadIdx.x] = v;
  out[32 + threadIdx.x] = __shfl_sync(0xffffffffu, in[threadIdx.x], 3);
}

__global__ void shfl_mask_without_self(float* out) {
  out[threadIdx.x] = __shfl_xor_sync(0x0000ffffu, 1.0f, 1);
}

__global__ void diverged_warp(float* out) {
  if (threadIdx.x == 0) {
    __syncwarp();
  } else {
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
  }
}

// Lane t copies 4 bytes of `in` into shared memory asynchronously; reports what it reads from
// its own slot before the wait, after the wait, and (after a barrier) a neighbour's slot.
__global__ void async_copies(const float* in, float* before, float* after, float* neighbour,
                             int invalid_lane) {
  float* s = ::odc_emu::dynamic_shared<float>();
  const int t = static_cast<int>(threadIdx.x);
  ::odc_emu::ptx::cp_async(s + t, in + t, 4, t != invalid_lane);
  ::odc_emu::ptx::cp_async_commit();
  before[t] = s[t];
  ::odc_emu::ptx::cp_async_wait(0, std::source_location::current());
  after[t] = s[t];
  __syncthreads();
  neighbour[t] = s[(t + 1) % static_cast<int>(blockDim.x)];
}

}  // namespace

TEST_CASE("emu: float -> bf16 rounds to nearest even and agrees with the definition", "[emu]") {
  using odc_emu_test::from_bf16;
  using odc_emu_test::to_bf16;
  // Ties: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 -> 1 (even); 1 + 3 * 2^-8 -> 1 + 2^-6.
  CHECK(__float2bfloat16_rn(1.0f + 0x1p-8f).__x == 0x3f80);
  CHECK(__float2bfloat16_rn(1.0f + 3 * 0x1p-8f).__x == 0x3f82);
  CHECK(__float2bfloat16_rn(-0.0f).__x == 0x8000);
  CHECK(std::isnan(__bfloat162float(__float2bfloat16_rn(NAN))));
  CHECK(__float2bfloat16_rn(INFINITY).__x == 0x7f80);
  std::mt19937 rng(1);
  std::uniform_int_distribution<std::uint32_t> bits(0, 0xffffffffu);
  int checked = 0;
  for (int i = 0; i < 200000; ++i) {
    std::uint32_t u = bits(rng);
    if (i % 3 == 0) u = (u & 0xffff0000u) | 0x8000u;  // force exact ties
    float f;
    std::memcpy(&f, &u, 4);
    if (!std::isfinite(f) || std::fabs(f) > 3.0e38f) continue;
    REQUIRE(__float2bfloat16_rn(f).__x == to_bf16(f));
    REQUIRE(__bfloat162float(__nv_bfloat16{to_bf16(f)}) == from_bf16(to_bf16(f)));
    ++checked;
  }
  CHECK(checked > 100000);
}

TEST_CASE("emu: __syncthreads orders shared memory between the threads of a block", "[emu]") {
  const int blocks = 3, threads = 96;
  std::vector<int> in(blocks * threads), out(in.size(), -1);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int>(i) * 7;
  ::odc_emu::launch(rotate_through_shared, "rotate", blocks, threads, threads * sizeof(int))(in.data(), out.data());
  for (int b = 0; b < blocks; ++b) {
    for (int t = 0; t < threads; ++t) REQUIRE(out[b * threads + t] == in[b * threads + (t + 1) % threads]);
  }
}

TEST_CASE("emu: a thread that exits before a barrier is reported, not a hang", "[emu]") {
  std::vector<int> out(64, 0);
  CHECK_THROWS_WITH(::odc_emu::launch(exit_before_barrier, "exit_before_barrier", 1, 64)(out.data()),
                    Catch::Contains("exit_before_barrier") && Catch::Contains("__syncthreads"));
}

TEST_CASE("emu: warp shuffles exchange values with the lane arithmetic of the guide", "[emu]") {
  std::vector<float> in(32), out(64, 0.0f);
  float total = 0.0f;
  for (int i = 0; i < 32; ++i) total += (in[i] = static_cast<float>(i + 1));
  ::odc_emu::launch(warp_sums, "warp_sums", 1, 32)(in.data(), out.data());
  for (int i = 0; i < 32; ++i) {
    CHECK(out[i] == total);  // exact: small integers
    CHECK(out[32 + i] == in[3]);
  }
}

TEST_CASE("emu: shuffle masks and divergence are checked", "[emu]") {
  std::vector<float> out(32, 0.0f);
  CHECK_THROWS_WITH(::odc_emu::launch(shfl_mask_without_self, "mask", 1, 32)(out.data()),
                    Catch::Contains("does not include the calling lane"));
  CHECK_THROWS_WITH(::odc_emu::launch(diverged_warp, "diverged", 1, 32)(out.data()),
                    Catch::Contains("diverged"));
}

TEST_CASE("emu: cp.async destinations are poisoned until the wait, invalid copies zero-fill", "[emu]") {
  const int n = 64;
  std::vector<float> in(n), before(n), after(n), neighbour(n);
  for (int i = 0; i < n; ++i) in[i] = static_cast<float>(i) + 0.5f;
  ::odc_emu::launch(async_copies, "async_copies", 1, n, n * sizeof(float))(
      in.data(), before.data(), after.data(), neighbour.data(), 9);
  for (int i = 0; i < n; ++i) {
    CHECK(std::isnan(before[i]));
    CHECK(after[i] == (i == 9 ? 0.0f : in[i]));
    CHECK(neighbour[i] == ((i + 1) % n == 9 ? 0.0f : in[(i + 1) % n]));
  }
}

TEST_CASE("emu: dynamic shared memory above 48 KiB needs cudaFuncSetAttribute", "[emu]") {
  std::vector<int> in(32, 1), out(32);
  CHECK_THROWS_WITH(::odc_emu::launch(rotate_through_shared, "rotate", 1, 32, 64 * 1024)(in.data(), out.data()),
                    Catch::Contains("cudaFuncSetAttribute"));
  REQUIRE(cudaFuncSetAttribute(rotate_through_shared, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024) == cudaSuccess);
  ::odc_emu::launch(rotate_through_shared, "rotate", 1, 32, 64 * 1024)(in.data(), out.data());
  CHECK(out[0] == 1);
}
