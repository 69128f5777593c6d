// Planted bugs: each fault makes the emulator run the attention kernels as if one line of their
// source were different (a cp.async wait or a barrier deleted, ldmatrix .trans swapped, a shfl
// mask narrowed). Every one must make the attention check fail, either by numbers far outside
// the tolerance (NaN from poisoned shared memory, wrong products) or by an emulator error; so a
// harness that passes the real kernels is not passing them vacuously.
//
// Sites are found by their text in the kernel sources (not by line numbers, which move).
#include <catch2/catch.hpp>

#include <fstream>
#include <string>

#include "attention_harness.h"
#include "emu_block.h"

using odc_emu::Faults;
using odc_emu::Schedule;
using odc_emu::UseSchedule;
using odc_emu::PlantFault;
using odc_emu::Site;
using odc_emu_test::AttentionCase;
using odc_emu_test::AttentionErrors;
using odc_emu_test::run_attention;

namespace {

// The line of `file` (under src/kernels/cuda) whose text contains `needle`, exactly once.
Site site_of(const std::string& file, const std::string& needle) {
  std::ifstream in(std::string(ODC_SOURCE_DIR) + "/src/kernels/cuda/" + file);
  REQUIRE(in.good());
  std::string line;
  int number = 0, found = 0, count = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find(needle) != std::string::npos) {
      found = number;
      ++count;
    }
  }
  INFO(file << ": '" << needle << "'");
  REQUIRE(count == 1);
  return Site{file, found};
}

const AttentionCase kCase{{0, 65, 65, 194}, 2, 1, 64};  // two sequences over several tiles
constexpr double kTol = 5e-3;                            // test_attention.cpp's bound

bool fails(const AttentionErrors& e) {
  // NaN compares false: !(x < tol) is true for NaN.
  return !(e.out < kTol) || !(e.dq < kTol) || !(e.dk < kTol) || !(e.dv < kTol);
}

}  // namespace

TEST_CASE("planted: the unfaulted case passes (the baseline of the faults below)", "[emu][planted]") {
  CHECK_FALSE(fails(run_attention(kCase, 7)));
}

TEST_CASE("planted: forward without the wait for V(kt) reads poisoned shared memory", "[emu][planted]") {
  Faults f;
  f.skip_wait = site_of("attention_forward.cuh", "cp_async_wait<0>();  // V(kt)");
  PlantFault plant(f);
  const AttentionErrors e = run_attention(kCase, 7, false);
  INFO(e.describe());
  CHECK(!(e.out < kTol));
}

TEST_CASE("planted: forward without the barrier after the wait for K(kt)", "[emu][planted]") {
  Faults f;
  f.skip_barrier = site_of("attention_forward.cuh", "__syncthreads();     // ... visible to all; every warp is done with V(kt - 1)");
  PlantFault plant(f);
  const AttentionErrors e = run_attention(kCase, 7, false);
  INFO(e.describe());
  CHECK(!(e.out < kTol));
}

TEST_CASE("planted: dQ without the barrier that protects V(kt) from the next copy", "[emu][planted]") {
  Faults f;
  f.skip_barrier = site_of("attention_backward.cuh", "__syncthreads();  // every warp is done with V(kt)");
  PlantFault plant(f);
  const AttentionErrors e = run_attention(kCase, 7);
  INFO(e.describe());
  CHECK(!(e.dq < kTol));
}

TEST_CASE("planted: dK/dV without the wait for its stage", "[emu][planted]") {
  Faults f;
  f.skip_wait = site_of("attention_backward.cuh", "cp_async_wait<0>();  // stage `it` (and K, V)");
  PlantFault plant(f);
  const AttentionErrors e = run_attention(kCase, 7);
  INFO(e.describe());
  CHECK((!(e.dk < kTol) || !(e.dv < kTol)));
}

TEST_CASE("planted: ldmatrix with .trans swapped gives wrong products", "[emu][planted]") {
  Faults f;
  f.swap_ldmatrix_trans = true;
  PlantFault plant(f);
  const AttentionErrors e = run_attention(kCase, 7, false);
  INFO(e.describe());
  CHECK(!(e.out < kTol));
}

TEST_CASE("planted: a shfl mask without the upper half-warp is reported", "[emu][planted]") {
  Faults f;
  f.shfl_mask_site = site_of("attention_forward.cuh", "mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));");
  f.shfl_mask = 0x0000ffffu;
  PlantFault plant(f);
  CHECK_THROWS_WITH(run_attention(kCase, 7, false),
                    Catch::Contains("membermask 0x0000ffff, which does not include the calling lane") &&
                        Catch::Contains("attention_forward.cuh"));
}

TEST_CASE("planted: removing any one barrier or cp.async wait of the attention kernels is caught", "[emu][planted]") {
  // Every __syncthreads and cp_async_wait line of the forward and backward kernels, one at a time,
  // under each interleaving; at least one must catch it. (Measured: all three catch every site but
  // one, the dQ barrier between the wait for V(kt) and dP = dO V^T, which round_robin misses: its
  // lockstep warps have all waited before any reads V; warps_forward and warps_backward catch it.)
  for (const std::string file : {"attention_forward.cuh", "attention_backward.cuh"}) {
    std::ifstream in(std::string(ODC_SOURCE_DIR) + "/src/kernels/cuda/" + file);
    REQUIRE(in.good());
    std::string line;
    int number = 0;
    while (std::getline(in, line)) {
      ++number;
      const bool barrier = line.find("__syncthreads();") != std::string::npos;
      const bool wait = line.find("cp_async_wait<") != std::string::npos;
      if (!barrier && !wait) continue;
      Faults f;
      (barrier ? f.skip_barrier : f.skip_wait) = Site{file, number};
      PlantFault plant(f);
      std::string report;
      int caught = 0;
      for (const auto order : {Schedule::round_robin, Schedule::warps_forward, Schedule::warps_backward}) {
        UseSchedule use(order);
        try {
          const AttentionErrors e = run_attention(kCase, 7);
          caught += fails(e);
          report += " [" + e.describe() + "]";
        } catch (const std::exception& ex) {
          ++caught;
          report += std::string(" [") + ex.what() + "]";
        }
      }
      INFO(file << ":" << number << " (round robin, warps forward, warps backward):" << report);
      CHECK(caught > 0);
    }
  }
}
