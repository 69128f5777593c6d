#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "odc/core/cpu_features.h"
#include "odc/core/error.h"

namespace {

const std::vector<std::string> kIsas = {"sse41",           "avx",              "avx2",
                                        "avx2_vnni",       "avx512_core",      "avx512_core_vnni",
                                        "avx512_core_bf16", "avx512_core_fp16", "avx512_core_amx"};

}  // namespace

TEST_CASE("isa_rank orders oneDNN's ISA names and rejects others", "[core][cpu_features]") {
  for (std::size_t i = 0; i < kIsas.size(); ++i) CHECK(odc::isa_rank(kIsas[i]) == static_cast<int>(i));
  CHECK(odc::isa_rank("avx2") < odc::isa_rank("avx512_core"));
  CHECK(odc::isa_rank("avx512_core_bf16") < odc::isa_rank("avx512_core_amx"));
  CHECK(odc::isa_rank("unknown") == -1);
  CHECK(odc::isa_rank("") == -1);
  CHECK(odc::isa_rank("AVX2") == -1);
  CHECK(odc::isa_rank("avx512") == -1);
}

TEST_CASE("fp32_vector_level: what an fp32 GEMM can use of an ISA", "[core][cpu_features]") {
  CHECK(odc::fp32_vector_level("sse41") == 0);
  CHECK(odc::fp32_vector_level("avx") == 1);
  CHECK(odc::fp32_vector_level("avx2") == 2);
  CHECK(odc::fp32_vector_level("avx2_vnni") == 2);
  // oneDNN 2.6's avx512_core sgemm on an avx512_core_fp16 CPU uses all of its fp32 width.
  CHECK(odc::fp32_vector_level("avx512_core") == odc::fp32_vector_level("avx512_core_fp16"));
  CHECK(odc::fp32_vector_level("avx512_core_amx") == 3);
  CHECK(odc::fp32_vector_level("unknown") == -1);
  CHECK(odc::fp32_vector_level("") == -1);
}

TEST_CASE("detect_cpu_features names the CPU and an ISA consistent with the compiler's checks",
          "[core][cpu_features]") {
  const odc::CpuFeatures f = odc::detect_cpu_features();
  CHECK_FALSE(f.name.empty());
  INFO(f.describe() << ", FMA path " << f.fma_path);
  CHECK(f.describe().find(f.isa) != std::string::npos);
#if defined(__x86_64__)
  CHECK_FALSE(f.vendor.empty());
  CHECK(f.family > 0);
  REQUIRE(odc::isa_rank(f.isa) >= 0);  // every x86-64 CPU in use has SSE4.1
  __builtin_cpu_init();
  const int rank = odc::isa_rank(f.isa);
  CHECK((rank >= odc::isa_rank("avx")) == (__builtin_cpu_supports("avx") != 0));
  CHECK((rank >= odc::isa_rank("avx2")) == (__builtin_cpu_supports("avx2") != 0));
  if (rank >= odc::isa_rank("avx512_core")) CHECK(__builtin_cpu_supports("avx512f"));
  if (!__builtin_cpu_supports("avx512f")) CHECK(rank < odc::isa_rank("avx512_core"));
  if (f.isa == "avx2_vnni") CHECK(__builtin_cpu_supports("avxvnni"));

  const std::string expected_fma = __builtin_cpu_supports("avx512f")                                   ? "avx512f"
                                   : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? "avx2"
                                                                                                       : "sse";
  CHECK(f.fma_path == expected_fma);
#endif
}

TEST_CASE("measure_fma_peak_flops is a positive, finite rate proportional to the threads", "[core][cpu_features]") {
  const double one = odc::measure_fma_peak_flops(1);
  CHECK(std::isfinite(one));
  CHECK(one > 1e9);  // any core since 2005 does more than 1 GFLOP/s, even on a loaded machine
  CHECK(one < 1e13);
  // Threads multiply one core's rate (which is measured again: a loaded machine may differ a lot).
  const double four = odc::measure_fma_peak_flops(4);
  CHECK(four > 4e9);
  CHECK_THROWS_AS(odc::measure_fma_peak_flops(0), odc::Error);
}
