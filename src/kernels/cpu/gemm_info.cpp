// Names the GEMM path for the start-up log and benchmark records: oneDNN's version, the
// instruction set it dispatches to on this CPU (its cpuid-based choice, capped only by
// ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA if a user sets it), and the sgemm kernel family that ISA
// selects.
#include <oneapi/dnnl/dnnl.h>

#include <fmt/format.h>

#include "odc/kernels/matmul.h"

namespace odc::kernels::cpu {
namespace {

std::string isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    case dnnl_cpu_isa_all: break;
  }
  return "unknown";
}

// oneDNN's fp32 sgemm has JIT kernels for these ISA families (gemm/f32 in its sources); a CPU
// below SSE4.1 gets the reference loops.
std::string sgemm_kernel(dnnl_cpu_isa_t isa) {
  const unsigned bits = static_cast<unsigned>(isa);
  const auto has = [bits](dnnl_cpu_isa_t family) {
    return (bits & static_cast<unsigned>(family)) == static_cast<unsigned>(family);
  };
  if (has(dnnl_cpu_isa_avx512_core)) return "jit sgemm avx512_core";
  if (has(dnnl_cpu_isa_avx2)) return "jit sgemm avx2";
  if (has(dnnl_cpu_isa_avx)) return "jit sgemm avx";
  if (has(dnnl_cpu_isa_sse41)) return "jit sgemm sse41";
  return "reference sgemm";
}

}  // namespace

GemmInfo gemm_info() {
  const dnnl_version_t* v = dnnl_version();
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  return {fmt::format("oneDNN {}.{}.{}", v->major, v->minor, v->patch), isa_name(isa), sgemm_kernel(isa)};
}

}  // namespace odc::kernels::cpu
