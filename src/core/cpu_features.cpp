#include "odc/core/cpu_features.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>

#include <fmt/format.h>

#include "odc/core/error.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace odc {

namespace {

constexpr std::array<std::string_view, 9> kIsaOrder = {
    "sse41", "avx", "avx2", "avx2_vnni", "avx512_core", "avx512_core_vnni", "avx512_core_bf16", "avx512_core_fp16",
    "avx512_core_amx"};

std::string trim(std::string s) {
  const auto begin = s.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  const auto end = s.find_last_not_of(" \t\r\n");
  return s.substr(begin, end - begin + 1);
}

// The first "model name" of /proc/cpuinfo; "" when there is none.
std::string proc_cpuinfo_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon != std::string::npos) return trim(line.substr(colon + 1));
  }
  return "";
}

// The FMA loops: 12 independent accumulators in registers (separate variables: an array would
// live in memory and make the loop load-bound), acc = acc * m + c. The caller passes m, c and the
// start value through volatile reads, so that the compiler cannot fold a chain that reaches a
// fixed point; with |m| < 1 the values converge and never reach denormals or infinity. 12 chains
// cover an FMA latency of 4 cycles on 2 ports. Returns the sum so that nothing is optimized away;
// FLOPs per iteration: 12 * lanes * 2.
#define ODC_FMA_LOOP(VEC, SET1, FMA, ADD, REDUCE)                                                      \
  const VEC m = SET1(mul), c = SET1(add);                                                             \
  VEC a0 = SET1(start), a1 = SET1(start + 0.1f), a2 = SET1(start + 0.2f), a3 = SET1(start + 0.3f),    \
      a4 = SET1(start + 0.4f), a5 = SET1(start + 0.5f), a6 = SET1(start + 0.6f),                      \
      a7 = SET1(start + 0.7f), a8 = SET1(start + 0.8f), a9 = SET1(start + 0.9f),                      \
      a10 = SET1(start + 1.0f), a11 = SET1(start + 1.1f);                                             \
  for (std::int64_t i = 0; i < iters; ++i) {                                                          \
    a0 = FMA(a0, m, c);                                                                               \
    a1 = FMA(a1, m, c);                                                                               \
    a2 = FMA(a2, m, c);                                                                               \
    a3 = FMA(a3, m, c);                                                                               \
    a4 = FMA(a4, m, c);                                                                               \
    a5 = FMA(a5, m, c);                                                                               \
    a6 = FMA(a6, m, c);                                                                               \
    a7 = FMA(a7, m, c);                                                                               \
    a8 = FMA(a8, m, c);                                                                               \
    a9 = FMA(a9, m, c);                                                                               \
    a10 = FMA(a10, m, c);                                                                             \
    a11 = FMA(a11, m, c);                                                                             \
  }                                                                                                   \
  const VEC sum = ADD(ADD(ADD(ADD(a0, a1), ADD(a2, a3)), ADD(ADD(a4, a5), ADD(a6, a7))),             \
                      ADD(ADD(a8, a9), ADD(a10, a11)));                                               \
  return REDUCE(sum);

#if defined(__x86_64__)

struct Regs {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
};

// cpuid(leaf, subleaf); all zero when the leaf is beyond the CPU's maximum.
Regs cpuid(unsigned leaf, unsigned subleaf = 0) {
  Regs r;
  if (__get_cpuid_count(leaf, subleaf, &r.eax, &r.ebx, &r.ecx, &r.edx) == 0) return {};
  return r;
}

std::string brand_string() {
  if (cpuid(0x80000000u).eax < 0x80000004u) return "";
  char text[49] = {};
  for (unsigned i = 0; i < 3; ++i) {
    const Regs r = cpuid(0x80000002u + i);
    std::memcpy(text + 16 * i, &r.eax, 4);
    std::memcpy(text + 16 * i + 4, &r.ebx, 4);
    std::memcpy(text + 16 * i + 8, &r.ecx, 4);
    std::memcpy(text + 16 * i + 12, &r.edx, 4);
  }
  return trim(text);
}

// Whether the kernel supports AMX tile data for user space (Linux >= 5.16; a process still asks
// for permission with ARCH_REQ_XCOMP_PERM before its first tile instruction, as oneDNN does).
bool os_supports_amx() {
#if defined(SYS_arch_prctl)
  constexpr int kArchGetXcompSupp = 0x1021;
  constexpr unsigned long long kXfeatureXtiledata = 1ull << 18;
  unsigned long long features = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompSupp, &features) != 0) return false;
  return (features & kXfeatureXtiledata) != 0;
#else
  return false;
#endif
}

// The best rung of kIsaOrder reached: each rung needs every rung below it. __builtin_cpu_supports
// checks the OS side too (XCR0: YMM state for AVX, opmask/ZMM state for AVX-512, tile state for
// AMX).
std::string best_isa() {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2");
  const bool avx512_core = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  const int steps[] = {  // __builtin_cpu_supports returns an int, non-zero when supported
      __builtin_cpu_supports("sse4.1"),
      __builtin_cpu_supports("avx"),
      avx2,
      // AVX-VNNI (VEX-encoded): oneDNN's avx2_vnni. An AVX-512 CPU need not have it, so it does not
      // gate the AVX-512 rungs.
      avx2 && __builtin_cpu_supports("avxvnni"),
      avx512_core,
      __builtin_cpu_supports("avx512vnni"),
      __builtin_cpu_supports("avx512bf16"),
      __builtin_cpu_supports("avx512fp16"),
      __builtin_cpu_supports("amx-tile") && __builtin_cpu_supports("amx-int8") &&
          __builtin_cpu_supports("amx-bf16") && os_supports_amx(),
  };
  int best = -1;
  for (int i = 0; i < static_cast<int>(std::size(steps)); ++i) {
    if (i == 3) {  // avx2_vnni: a side rung, see above
      if (steps[i]) best = i;
      continue;
    }
    if (!steps[i]) break;
    best = i;
  }
  return best < 0 ? "unknown" : std::string(kIsaOrder[static_cast<std::size_t>(best)]);
}

__attribute__((target("avx512f"))) float sum_lanes_512(__m512 v) {
  float lanes[16];
  _mm512_storeu_ps(lanes, v);
  float sum = 0.0f;
  for (float x : lanes) sum += x;
  return sum;
}
__attribute__((target("avx512f"), noinline)) float fma_loop_avx512(std::int64_t iters, float mul, float add, float start) {
  ODC_FMA_LOOP(__m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps, sum_lanes_512)
}

__attribute__((target("avx2,fma"))) float sum_lanes_256(__m256 v) {
  float lanes[8];
  _mm256_storeu_ps(lanes, v);
  float sum = 0.0f;
  for (float x : lanes) sum += x;
  return sum;
}
__attribute__((target("avx2,fma"), noinline)) float fma_loop_avx2(std::int64_t iters, float mul, float add, float start) {
  ODC_FMA_LOOP(__m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps, sum_lanes_256)
}

// No FMA: a multiply and a dependent add per lane (2 FLOPs, as one FMA).
__m128 mul_add_128(__m128 a, __m128 b, __m128 c) { return _mm_add_ps(_mm_mul_ps(a, b), c); }
float sum_lanes_128(__m128 v) {
  float lanes[4];
  _mm_storeu_ps(lanes, v);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}
__attribute__((noinline)) float fma_loop_sse(std::int64_t iters, float mul, float add, float start) {
  ODC_FMA_LOOP(__m128, _mm_set1_ps, mul_add_128, _mm_add_ps, sum_lanes_128)
}

std::string fma_path() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return "avx512f";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "avx2";
  return "sse";
}

#else

float scalar_set1(float x) { return x; }
float scalar_mul_add(float a, float b, float c) { return a * b + c; }
float scalar_add(float a, float b) { return a + b; }
float scalar_sum(float a) { return a; }
__attribute__((noinline)) float fma_loop_scalar(std::int64_t iters, float mul, float add, float start) {
  ODC_FMA_LOOP(float, scalar_set1, scalar_mul_add, scalar_add, scalar_sum)
}

#endif  // __x86_64__

#undef ODC_FMA_LOOP

}  // namespace

std::string CpuFeatures::describe() const {
  return fmt::format("{} (family {} model {}), ISA {}", name, family, model, isa);
}

CpuFeatures detect_cpu_features() {
  CpuFeatures f;
  f.name = proc_cpuinfo_name();
#if defined(__x86_64__)
  const Regs leaf0 = cpuid(0);
  char vendor[13] = {};
  std::memcpy(vendor, &leaf0.ebx, 4);
  std::memcpy(vendor + 4, &leaf0.edx, 4);
  std::memcpy(vendor + 8, &leaf0.ecx, 4);
  f.vendor = vendor;
  const unsigned eax = cpuid(1).eax;
  const int base_family = static_cast<int>((eax >> 8) & 0xF);
  const int base_model = static_cast<int>((eax >> 4) & 0xF);
  f.family = base_family == 0xF ? base_family + static_cast<int>((eax >> 20) & 0xFF) : base_family;
  f.model = base_family == 0x6 || base_family == 0xF ? (static_cast<int>((eax >> 16) & 0xF) << 4) + base_model
                                                      : base_model;
  if (f.name.empty()) f.name = brand_string();
  f.isa = best_isa();
  f.fma_path = fma_path();
#else
  f.isa = "unknown";
  f.fma_path = "scalar";
#endif
  if (f.name.empty()) f.name = "unknown CPU";
  return f;
}

int isa_rank(std::string_view isa) {
  const auto it = std::find(kIsaOrder.begin(), kIsaOrder.end(), isa);
  return it == kIsaOrder.end() ? -1 : static_cast<int>(it - kIsaOrder.begin());
}

int fp32_vector_level(std::string_view isa) {
  if (isa == "sse41") return 0;
  if (isa == "avx") return 1;
  if (isa == "avx2" || isa == "avx2_vnni") return 2;
  if (isa.starts_with("avx512_core")) return 3;
  return -1;
}

double measure_fma_peak_flops(int threads) {
  if (threads < 1) fail("measure_fma_peak_flops needs at least 1 thread, got {}", threads);
#if defined(__x86_64__)
  // Iterations for ~25 ms per run on a current core (Zen 3 AVX2: 2 FMA ports x 8 lanes).
  const std::string path = fma_path();
  const int lanes = path == "avx512f" ? 16 : path == "avx2" ? 8 : 4;
  const std::int64_t iters = path == "avx512f" ? 12'000'000 : 20'000'000;
  auto loop = path == "avx512f" ? fma_loop_avx512 : path == "avx2" ? fma_loop_avx2 : fma_loop_sse;
#else
  const int lanes = 1;
  const std::int64_t iters = 20'000'000;
  auto loop = fma_loop_scalar;
#endif
  const double flops = 2.0 * 12.0 * lanes * static_cast<double>(iters);
  double best = 0.0;
  volatile float mul = 0.99999988f, add = 1e-7f, first = 1.0f, sink = 0.0f;
  for (int run = 0; run < 3; ++run) {
    const auto start = std::chrono::steady_clock::now();
    sink = sink + loop(iters, mul, add, first);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (seconds > 0) best = std::max(best, flops / seconds);
  }
  return best * threads;
}

}  // namespace odc
