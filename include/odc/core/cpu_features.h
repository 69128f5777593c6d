#pragma once
// What this CPU is and what its cores can compute at best: the start-up log names the CPU and its
// vector ISA, and the CPU backend's MFU denominator is the measured FMA peak of its cores (not the
// rate of whatever GEMM the BLAS happens to run, which would flatter a slow GEMM path).
#include <string>
#include <string_view>

namespace odc {

struct CpuFeatures {
  std::string name;    // /proc/cpuinfo "model name", else the cpuid brand string, else "unknown CPU"
  std::string vendor;  // the cpuid vendor ("AuthenticAMD", "GenuineIntel"); "" where there is no cpuid
  int family = 0;      // display family and model (cpuid leaf 1 with the extended fields applied)
  int model = 0;
  // The best vector ISA both the CPU and the OS support, in oneDNN's names, in increasing order:
  // "sse41", "avx", "avx2", "avx2_vnni", "avx512_core" (AVX-512 F/BW/DQ/VL), "avx512_core_vnni",
  // "avx512_core_bf16", "avx512_core_fp16", "avx512_core_amx" (AMX tiles that the kernel supports,
  // ARCH_GET_XCOMP_SUPP). "unknown" below SSE4.1 or off x86-64.
  std::string isa;
  // The FMA loop measure_fma_peak_flops runs here: "avx512f" (16 fp32 lanes), "avx2" (AVX2 + FMA,
  // 8 lanes) or "sse" (4 lanes, a multiply and an add: no FMA).
  std::string fma_path;

  // "AMD EPYC 7763 (family 25 model 1), ISA avx2".
  std::string describe() const;
};

// Reads cpuid (and /proc/cpuinfo for the name); cheap, no side effects.
CpuFeatures detect_cpu_features();

// The position of `isa` in the order above (sse41 = 0 ... avx512_core_amx = 8); -1 for anything
// else ("unknown", ""): compare two ISAs only when both ranks are >= 0.
int isa_rank(std::string_view isa);

// What an fp32 GEMM can use of an ISA: its vector width class (sse41 = 0, avx = 1, avx2 and
// avx2_vnni = 2, every avx512_* = 3; -1 unknown). VNNI, BF16, FP16 and AMX add nothing to fp32
// products, so a CPU with avx512_core_fp16 running oneDNN's avx512_core sgemm is not below its ISA.
int fp32_vector_level(std::string_view isa);

// Peak fp32 FLOP/s of `threads` cores: one core's measured rate times `threads` (>= 1; an
// odc::Error otherwise). The core's rate is the best of 3 runs of a fixed loop of independent
// FMAs (12 register accumulators, no memory operands; ~25 ms each on a current core) in the widest
// FMA ISA the CPU and OS support (CpuFeatures::fma_path), on the calling thread. Multiplying
// instead of running `threads` loops at once keeps it short and deterministic; it slightly
// overstates an all-core peak where the all-core clock is below the one-core turbo, or where two
// threads share a core (SMT) — a ceiling, which is what an MFU denominator should be.
double measure_fma_peak_flops(int threads);

}  // namespace odc
