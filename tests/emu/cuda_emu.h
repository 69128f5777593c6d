#pragma once
// The CUDA device API on the CPU, for compiling the real kernel sources (src/kernels/cuda) with
// the host compiler: qualifiers, built-in variables and vector types, __nv_bfloat16, math
// intrinsics, __syncthreads / __syncwarp / shfl with their synchronization semantics, atomics
// and kernel launches. Reached through the shims in tests/emu/include (cuda_runtime.h,
// cuda_bf16.h), which the emulated build puts before the toolkit's headers; the sources are
// first passed through rewrite_cuda.py (launch syntax and __shared__ declarations).

#include <cmath>
#include <cstdint>
#include <cstring>
#include <source_location>
#include <tuple>
#include <type_traits>
#include <utility>

#include "emu_block.h"

#define ODC_CUDA_EMULATION 1

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
// __shared__ is deliberately not defined: rewrite_cuda.py turns every __shared__ declaration
// into block storage, and a form it does not know fails to compile instead of becoming a
// per-thread variable.

// ---- vector types and built-in variables ----

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct alignas(8) int2 {
  int x, y;
};
struct alignas(16) int4 {
  int x, y, z, w;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct alignas(8) float2 {
  float x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline float2 make_float2(float x, float y) { return {x, y}; }

constexpr int warpSize = 32;

namespace odc_emu {
inline uint3 as_uint3(Index3 i) { return {i.x, i.y, i.z}; }
inline uint3 thread_idx() { return as_uint3(this_thread().idx); }
inline uint3 block_idx() { return as_uint3(this_block().block_idx()); }
inline dim3 block_dim() {
  const Index3 d = this_block().block_dim();
  return dim3(d.x, d.y, d.z);
}
inline dim3 grid_dim() {
  const Index3 d = this_block().grid_dim();
  return dim3(d.x, d.y, d.z);
}
}  // namespace odc_emu

#define threadIdx (::odc_emu::thread_idx())
#define blockIdx (::odc_emu::block_idx())
#define blockDim (::odc_emu::block_dim())
#define gridDim (::odc_emu::grid_dim())

// ---- integer and float helpers of the device library ----

inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }

// Fast-math intrinsics: the device versions are approximations within a few ulp; the emulator
// uses the accurate ones, and the tests' tolerances cover the difference.
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
// Round-to-nearest double operations the device compiler never fuses into a multiply-add; the
// host compiler here targets no FMA instructions and fuses none either.
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __dadd_rn(double a, double b) { return a + b; }

// ---- synchronization ----

inline void __syncthreads(std::source_location where = std::source_location::current()) {
  ::odc_emu::this_block().syncthreads(where);
}

namespace odc_emu {
inline void combine_nothing(WarpState&) {}

// shfl: in = {value bits, source lane}; out = value bits. A source lane outside the mask gives
// an undefined value (PTX ISA, shfl.sync): all-ones bits here (NaN for floats).
struct ShflIn {
  std::uint64_t bits;
  int src;
};
inline void combine_shfl(WarpState& w) {
  for (int lane = 0; lane < 32; ++lane) {
    if (((w.mask >> lane) & 1u) == 0) continue;
    const auto* in = static_cast<const ShflIn*>(w.slots[lane].in);
    const int src = in->src;
    const bool ok = src >= 0 && src < 32 && ((w.mask >> src) & 1u) != 0;
    *static_cast<std::uint64_t*>(w.slots[lane].out) =
        ok ? static_cast<const ShflIn*>(w.slots[src].in)->bits : ~std::uint64_t{0};
  }
}

template <typename T>
T shfl(unsigned mask, T value, int src_lane, const char* what, std::source_location where) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "shfl of a value up to 8 bytes");
  if (faults().shfl_mask_site.matches(where)) mask = faults().shfl_mask;
  ShflIn in{0, src_lane};
  std::memcpy(&in.bits, &value, sizeof(T));
  std::uint64_t out = 0;
  this_block().warp_collective(mask, what, &combine_shfl, &in, &out, where);
  T result;
  std::memcpy(&result, &out, sizeof(T));
  return result;
}

inline int lane_id() { return this_thread().lane; }
}  // namespace odc_emu

inline void __syncwarp(unsigned mask = 0xffffffffu,
                       std::source_location where = std::source_location::current()) {
  ::odc_emu::this_block().warp_collective(mask, "__syncwarp", &::odc_emu::combine_nothing, nullptr,
                                          nullptr, where);
}

// Source lanes per the CUDA programming guide: sub-warps of `width` lanes (a power of two).
template <typename T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32,
                  std::source_location where = std::source_location::current()) {
  const int lane = ::odc_emu::lane_id();
  int src = lane ^ lane_mask;
  if (src >= ((lane & ~(width - 1)) + width)) src = lane;
  return ::odc_emu::shfl(mask, value, src, "__shfl_xor_sync", where);
}
template <typename T>
T __shfl_sync(unsigned mask, T value, int src_lane, int width = 32,
              std::source_location where = std::source_location::current()) {
  const int lane = ::odc_emu::lane_id();
  const int src = (lane & ~(width - 1)) + (src_lane & (width - 1));
  return ::odc_emu::shfl(mask, value, src, "__shfl_sync", where);
}
template <typename T>
T __shfl_down_sync(unsigned mask, T value, unsigned delta, int width = 32,
                   std::source_location where = std::source_location::current()) {
  const int lane = ::odc_emu::lane_id();
  const int sub = lane & (width - 1);
  const int src = sub + static_cast<int>(delta) < width ? lane + static_cast<int>(delta) : lane;
  return ::odc_emu::shfl(mask, value, src, "__shfl_down_sync", where);
}
template <typename T>
T __shfl_up_sync(unsigned mask, T value, unsigned delta, int width = 32,
                 std::source_location where = std::source_location::current()) {
  const int lane = ::odc_emu::lane_id();
  const int sub = lane & (width - 1);
  const int src = sub >= static_cast<int>(delta) ? lane - static_cast<int>(delta) : lane;
  return ::odc_emu::shfl(mask, value, src, "__shfl_up_sync", where);
}

// ---- atomics: fibers of a block interleave only at synchronization points and blocks run one
// at a time, so a plain read-modify-write is atomic here ----

template <typename T>
T atomicAdd(T* address, T value) {
  const T old = *address;
  *address = old + value;
  return old;
}
inline int atomicMax(int* address, int value) {
  const int old = *address;
  if (value > old) *address = value;
  return old;
}

// ---- kernel launch ----

struct CUstream_st;
using cudaStream_t = CUstream_st*;

namespace odc_emu {

template <typename... P>
class Launcher {
 public:
  Launcher(void (*kernel)(P...), const char* name, dim3 grid, dim3 block, std::size_t smem)
      : kernel_(kernel), name_(name), grid_(grid), block_(block), smem_(smem) {}

  // The arguments convert to the kernel's parameter types once, as in a real launch; every
  // thread then calls the kernel with copies.
  template <typename... A>
  void operator()(A&&... args) const {
    static_assert(sizeof...(A) == sizeof...(P), "kernel launched with the wrong argument count");
    const Call call{kernel_, std::tuple<std::decay_t<P>...>(std::forward<A>(args)...)};
    run_grid(name_, reinterpret_cast<const void*>(kernel_), {grid_.x, grid_.y, grid_.z},
             {block_.x, block_.y, block_.z}, smem_, BodyRef{&Call::run, &call});
  }

 private:
  struct Call {
    void (*kernel)(P...);
    std::tuple<std::decay_t<P>...> params;
    static void run(const void* self) {
      const auto& c = *static_cast<const Call*>(self);
      std::apply(c.kernel, c.params);
    }
  };
  void (*kernel_)(P...);
  const char* name_;
  dim3 grid_, block_;
  std::size_t smem_;
};

// `kernel<<<grid, block, smem, stream>>>(args)` becomes `launch(kernel, "kernel", grid, block,
// smem, stream)(args)` (rewrite_cuda.py). Streams run in order: everything is synchronous.
template <typename... P>
Launcher<P...> launch(void (*kernel)(P...), const char* name, dim3 grid, dim3 block,
                      std::size_t smem = 0, cudaStream_t = nullptr) {
  return Launcher<P...>(kernel, name, grid, block, smem);
}

// A kernel template launched with deduced template arguments: `call` is a generic lambda calling
// it. The arguments are copied once; each thread calls with copies (so they convert to the
// parameter types per thread, with the same result). No kernel identity: such launches get the
// default dynamic shared memory limit.
template <typename Call>
class DeducedLauncher {
 public:
  DeducedLauncher(Call call, const char* name, dim3 grid, dim3 block, std::size_t smem)
      : call_(call), name_(name), grid_(grid), block_(block), smem_(smem) {}
  template <typename... A>
  void operator()(A&&... args) const {
    struct Bound {
      Call call;
      std::tuple<std::decay_t<A>...> params;
      static void run(const void* self) {
        const auto& b = *static_cast<const Bound*>(self);
        std::apply(b.call, b.params);
      }
    };
    const Bound bound{call_, std::tuple<std::decay_t<A>...>(std::forward<A>(args)...)};
    run_grid(name_, nullptr, {grid_.x, grid_.y, grid_.z}, {block_.x, block_.y, block_.z}, smem_,
             BodyRef{&Bound::run, &bound});
  }

 private:
  Call call_;
  const char* name_;
  dim3 grid_, block_;
  std::size_t smem_;
};
template <typename Call>
DeducedLauncher<Call> launch_deduced(Call call, const char* name, dim3 grid, dim3 block,
                                     std::size_t smem = 0, cudaStream_t = nullptr) {
  return DeducedLauncher<Call>(call, name, grid, block, smem);
}

// Dynamic (extern __shared__) and static __shared__ storage of the running block.
template <typename T>
T* dynamic_shared() {
  return reinterpret_cast<T*>(this_block().dynamic_smem());
}
template <typename T>
T& static_shared(const void* site) {
  return *static_cast<T*>(this_block().static_shared(site, sizeof(T), alignof(T)));
}

}  // namespace odc_emu

// A distinct address per declaration site (and per template instantiation of its kernel).
#define ODC_EMU_SITE ([]() -> const void* { static const char site = 0; return &site; }())
