// The real CUDA attention (attention.cu with its tile tables and all four kernels), executed by
// the emulator, against the float64 reference.
//
// Tolerances: inputs are exact bf16, so the reference sees the kernels' inputs. The kernels round
// P (forward, dK/dV, dQ) and dS to bf16 before the tensor-core products and their outputs to bf16:
// each rounding is a relative error of at most 2^-9 per element with no systematic sign, so the
// normwise error of the outputs is about 2^-9 = 0.2% (measured 0.19% for out, 0.25% for dq, dk,
// dv on these cases). Bounds: 5e-3 normwise for out, dq, dk, dv (twice the measured error, a
// quarter of what one wrongly masked key among ~30 would add); lse (fp32 from fp32 sums of
// exact products, measured <= 1e-6) within 1e-3 absolute. A wrong mask, tile edge, head mapping or a lost tile gives errors of order 1 (or
// NaN, which fails every comparison).
//
// Each case runs under one of the emulator's three thread interleavings (by its seed), so every
// interleaving sees the kernels; test_planted_faults.cpp shows which missing barrier each finds.
#include <catch2/catch.hpp>

#include "attention_checks.h"
#include "attention_harness.h"
#include "emu_block.h"

using odc_emu_test::AttentionCase;
using odc_emu_test::bounds;
using odc_emu_test::check;
using odc_emu_test::run_attention;

TEST_CASE("attention d64: tile edges 63-65 and 127-129, empty sequences, GQA groups 1-8", "[emu][attention]") {
  // The forward tiles 128 query rows, dQ 64, dK/dV 64 keys with 64-query steps (d64): these
  // lengths end one before, on and one after each tile boundary; empty sequences in between.
  const auto cu = bounds({63, 0, 65, 1, 129, 0, 64, 127, 128});
  for (const auto& [heads, kv] : {std::pair{1, 1}, std::pair{2, 1}, std::pair{6, 2}, std::pair{8, 1}}) {
    check({cu, heads, kv, 64}, 10u + static_cast<std::uint32_t>(heads));
  }
}

TEST_CASE("attention d128: tile edges, GQA groups 1, 4 and 8", "[emu][attention]") {
  // d128: dK/dV steps over 32 queries; lengths around 32-multiples as well as the 64/128 tiles.
  const auto cu = bounds({65, 33, 0, 129, 31, 128});
  for (const auto& [heads, kv] : {std::pair{2, 2}, std::pair{4, 1}, std::pair{8, 1}}) {
    check({cu, heads, kv, 128}, 20u + static_cast<std::uint32_t>(heads));
  }
}

TEST_CASE("attention: groups 3, 5, 6 and 7 over ragged lengths", "[emu][attention]") {
  check({bounds({17, 70, 0, 5}), 3, 1, 64}, 31);
  check({bounds({0, 33, 70}), 6, 1, 64}, 34);  // an empty first sequence
  check({bounds({40, 1, 66}), 10, 2, 64}, 32);
  check({bounds({90, 2}), 7, 1, 128}, 33);
}

TEST_CASE("attention: a long sequence crosses several key tiles and query tiles", "[emu][attention]") {
  check({bounds({300}), 2, 1, 64}, 41);
  check({bounds({257}), 2, 2, 128}, 42);
}

TEST_CASE("attention: only empty sequences and no tokens run nothing", "[emu][attention]") {
  const auto e = run_attention({bounds({0, 0}), 4, 2, 64}, 51);
  CHECK(e.out == 0.0);
  CHECK(e.dq == 0.0);
}
