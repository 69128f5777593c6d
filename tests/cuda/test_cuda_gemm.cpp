// cuBLASLt GEMMs (cuda_gemm.h) against the CPU BLAS kernels (matmul.h) on the same bf16-rounded
// inputs. Needs a GPU (see cuda_main.cpp).
//
// Tolerances:
//  - bf16 outputs: 1e-2 relative (+1e-4 of the largest |ref| absolute, for entries that cancel to
//    near zero). The GPU rounds each output to bf16 (relative error <= 2^-9 ~ 2e-3); both sides
//    accumulate the same exact bf16 products in fp32, differing only in summation order.
//  - fp32 outputs: 1e-3 relative + 1e-3 of max |ref|: no output rounding, but tensor-core fp32
//    accumulation (and split-k reductions) differ in order and alignment from OpenBLAS's sgemm.
//  - gradients: cosine >= 0.999 and a normwise relative error (check_grad): <= 1e-2 for bf16
//    outputs (the output rounding, 2^-9 per element, puts correct results near 1e-3), <= 1e-3 for
//    the fp32 accumulators (no output rounding; the fp32 tolerance above, normwise).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "odc/core/dtype.h"
#include "odc/core/error.h"
#include "odc/kernels/cuda_device.h"
#include "odc/kernels/cuda_gemm.h"
#include "odc/kernels/matmul.h"

#include "cuda_test_support.h"

using namespace odc::test::cuda;
namespace cu = odc::kernels::cuda;
namespace cpu = odc::kernels::cpu;

namespace {

constexpr std::uint16_t kNanBits = 0x7fc0;  // a bf16 quiet NaN: must not survive a beta-0 GEMM

std::vector<float> nan_f32(std::size_t n) { return std::vector<float>(n, std::nanf("")); }

}  // namespace

TEST_CASE("cuda gemm matches cpu::gemm for every transpose, ld and alignment", "[cuda][gemm]") {
  std::mt19937 rng(2024);
  cu::DeviceAllocator alloc;
  cu::Blas blas;
  const std::int64_t m = 37, n = 53, k = 70;
  for (bool trans_a : {false, true}) {
    for (bool trans_b : {false, true}) {
      for (std::int64_t offset : {0, 1}) {  // offset 1: A, B, C only 2- (bf16) or 4-byte aligned
        INFO("trans_a=" << trans_a << " trans_b=" << trans_b << " offset=" << offset);
        const std::int64_t a_rows = trans_a ? k : m, a_cols = trans_a ? m : k;
        const std::int64_t b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
        const std::int64_t lda = a_cols + 3, ldb = b_cols + 5, ldc = n + 2;  // padded row strides
        auto a = random_bf16(offset + a_rows * lda, rng);
        auto b = random_bf16(offset + b_rows * ldb, rng);
        const float alpha = 0.5f, beta = 0.75f;
        auto d_a = to_device(alloc, a.bits), d_b = to_device(alloc, b.bits);
        const auto* pa = d_a.as<std::uint16_t>() + offset;
        const auto* pb = d_b.as<std::uint16_t>() + offset;

        // bf16 C.
        auto c0 = random_bf16(offset + m * ldc, rng);
        std::vector<float> ref(c0.f.begin() + offset, c0.f.end());
        cpu::gemm<float>(trans_a, trans_b, m, n, k, alpha, a.f.data() + offset, lda,
                         b.f.data() + offset, ldb, beta, ref.data(), ldc);
        auto d_c = to_device(alloc, c0.bits);
        cu::gemm(blas, trans_a, trans_b, m, n, k, alpha, pa, lda, pb, ldb, beta,
                 d_c.as<std::uint16_t>() + offset, ldc, cu::GemmOut::bf16, nullptr);
        auto c_gpu = to_f32(from_device<std::uint16_t>(d_c, offset + m * ldc));
        // The padding columns [n, ldc) are compared too: untouched, so exactly equal.
        check_close("gemm bf16 C", std::vector<float>(c_gpu.begin() + offset, c_gpu.end()), ref);

        // fp32 C.
        auto cf0 = random_f32(offset + m * ldc, rng);
        std::vector<float> ref32(cf0.begin() + offset, cf0.end());
        cpu::gemm<float>(trans_a, trans_b, m, n, k, alpha, a.f.data() + offset, lda,
                         b.f.data() + offset, ldb, beta, ref32.data(), ldc);
        auto d_cf = to_device(alloc, cf0);
        cu::gemm(blas, trans_a, trans_b, m, n, k, alpha, pa, lda, pb, ldb, beta,
                 d_cf.as<float>() + offset, ldc, cu::GemmOut::f32, nullptr);
        auto cf_gpu = from_device<float>(d_cf, offset + m * ldc);
        check_close("gemm f32 C", std::vector<float>(cf_gpu.begin() + offset, cf_gpu.end()), ref32,
                    1e-3, 1e-3);
      }
    }
  }
  // One plan per (transposes, alignment, C type): 4 x 2 x 2 (allocator blocks are cudaMalloc'ed,
  // so offset 0 is always 256-byte aligned). The calls below reuse or add none.
  const std::size_t plans = blas.cached_plans();
  CHECK(plans == 16);

  // k == 0: C = beta * C (beta 0 clears, even NaN).
  auto c0 = random_f32(m * n, rng);
  auto d_c = to_device(alloc, c0);
  cu::gemm(blas, false, false, m, n, 0, 1.0f, nullptr, 1, nullptr, n, 2.0f, d_c.as<float>(), n,
           cu::GemmOut::f32, nullptr);
  auto scaled = from_device<float>(d_c, m * n);
  for (auto& v : c0) v *= 2.0f;
  CHECK(scaled == c0);
  auto d_nan = to_device(alloc, nan_f32(m * n));
  cu::gemm(blas, false, false, m, n, 0, 1.0f, nullptr, 1, nullptr, n, 0.0f, d_nan.as<float>(), n,
           cu::GemmOut::f32, nullptr);
  CHECK(from_device<float>(d_nan, m * n) == std::vector<float>(m * n, 0.0f));
  CHECK(blas.cached_plans() == plans);

  // Invalid leading dimensions are rejected before cuBLASLt sees them.
  const auto* any = d_c.as<std::uint16_t>();  // never dereferenced
  CHECK_THROWS_AS(cu::gemm(blas, false, false, m, n, k, 1.0f, any, k - 1, any, n, 0.0f,
                           d_c.as<float>(), n, cu::GemmOut::f32, nullptr),
                  odc::Error);
  CHECK_THROWS_AS(cu::gemm(blas, false, true, m, n, k, 1.0f, any, k, any, k, 0.0f,
                           d_c.as<float>(), n - 1, cu::GemmOut::f32, nullptr),
                  odc::Error);
}

TEST_CASE("linear_forward matches cpu::linear_forward", "[cuda][gemm][linear]") {
  std::mt19937 rng(17);
  cu::DeviceAllocator alloc;
  cu::Blas blas;
  struct Shape {
    std::int64_t rows, in, out;
  };
  // Odd sizes (rows 37; in 33 and out 17 make unaligned row strides) and a large square-ish one.
  for (Shape s : {Shape{37, 96, 200}, Shape{5, 33, 17}, Shape{2048, 2048, 4096}}) {
    for (bool with_bias : {false, true}) {
      INFO("rows=" << s.rows << " in=" << s.in << " out=" << s.out << " bias=" << with_bias);
      auto x = random_bf16(s.rows * s.in, rng);
      auto w = random_bf16(s.out * s.in, rng, 0.05f);
      auto bias = random_bf16(s.out, rng, 0.5f);
      std::vector<float> ref(s.rows * s.out);
      cpu::linear_forward<float>(x.f.data(), w.f.data(), with_bias ? bias.f.data() : nullptr,
                                 ref.data(), s.rows, s.in, s.out);
      auto d_x = to_device(alloc, x.bits), d_w = to_device(alloc, w.bits);
      auto d_b = to_device(alloc, bias.bits);
      auto d_y = to_device(alloc, Bits(s.rows * s.out, kNanBits));  // must be fully overwritten
      cu::linear_forward(blas, d_x.as<std::uint16_t>(), d_w.as<std::uint16_t>(),
                         with_bias ? d_b.as<std::uint16_t>() : nullptr, d_y.as<std::uint16_t>(),
                         s.rows, s.in, s.out, nullptr);
      check_close(with_bias ? "linear_forward y (+bias)" : "linear_forward y",
                  to_f32(from_device<std::uint16_t>(d_y, s.rows * s.out)), ref);
    }
  }
}

TEST_CASE("linear_backward matches cpu::linear_backward", "[cuda][gemm][linear]") {
  std::mt19937 rng(23);
  cu::DeviceAllocator alloc;
  cu::Blas blas;
  struct Shape {
    std::int64_t rows, in, out;
  };
  for (Shape s : {Shape{37, 96, 200}, Shape{2048, 2048, 4096}}) {
    INFO("rows=" << s.rows << " in=" << s.in << " out=" << s.out);
    auto x = random_bf16(s.rows * s.in, rng);
    auto w = random_bf16(s.out * s.in, rng, 0.05f);
    auto dy = random_bf16(s.rows * s.out, rng);
    auto dx0 = random_bf16(s.rows * s.in, rng);
    // Prior accumulator contents of the size of one step's gradient, so that a dropped or doubled
    // accumulation moves the cosine well below 0.999.
    auto dw0 = random_f32(s.out * s.in, rng, std::sqrt(float(s.rows)));
    auto db0 = random_f32(s.out, rng, std::sqrt(float(s.rows)));
    auto d_x = to_device(alloc, x.bits), d_w = to_device(alloc, w.bits);
    auto d_dy = to_device(alloc, dy.bits);

    for (bool accumulate : {false, true}) {
      INFO("dx_accumulate=" << accumulate);
      std::vector<float> dx_ref = accumulate ? dx0.f : std::vector<float>(s.rows * s.in, 0.0f);
      std::vector<float> dw_ref = dw0, db_ref = db0;
      cpu::linear_backward<float>(dy.f.data(), x.f.data(), w.f.data(), dx_ref.data(),
                                  dw_ref.data(), db_ref.data(), s.rows, s.in, s.out, accumulate);
      // Overwrite mode starts from NaN: beta 0 must not read dx.
      auto d_dx = to_device(alloc, accumulate ? dx0.bits : Bits(s.rows * s.in, kNanBits));
      auto d_dw = to_device(alloc, dw0), d_db = to_device(alloc, db0);
      cu::linear_backward(blas, d_dy.as<std::uint16_t>(), d_x.as<std::uint16_t>(),
                          d_w.as<std::uint16_t>(), d_dx.as<std::uint16_t>(), d_dw.as<float>(),
                          d_db.as<float>(), s.rows, s.in, s.out, accumulate, alloc, nullptr);
      check_grad(accumulate ? "linear_backward dx (accumulate)" : "linear_backward dx",
                 to_f32(from_device<std::uint16_t>(d_dx, s.rows * s.in)), dx_ref);
      check_grad("linear_backward dweight (+=)", from_device<float>(d_dw, s.out * s.in), dw_ref,
                 0.999, 1e-3);
      check_grad("linear_backward dbias (+=)", from_device<float>(d_db, s.out), db_ref, 0.999,
                 1e-3);
      // Both fp32 accumulators also within the fp32 GEMM tolerance.
      check_close("linear_backward dweight (fp32)", from_device<float>(d_dw, s.out * s.in), dw_ref,
                  1e-3, 1e-3);
      check_close("linear_backward dbias (fp32)", from_device<float>(d_db, s.out), db_ref, 1e-3,
                  1e-3);
    }

    // dx and dbias skipped (nullptr): only dweight changes.
    std::vector<float> dw_ref = dw0;
    std::vector<float> unused_dx(s.rows * s.in);
    cpu::linear_backward<float>(dy.f.data(), x.f.data(), w.f.data(), unused_dx.data(),
                                dw_ref.data(), nullptr, s.rows, s.in, s.out, false);
    auto d_dw = to_device(alloc, dw0);
    cu::linear_backward(blas, d_dy.as<std::uint16_t>(), d_x.as<std::uint16_t>(),
                        d_w.as<std::uint16_t>(), nullptr, d_dw.as<float>(), nullptr, s.rows, s.in,
                        s.out, false, alloc, nullptr);
    check_grad("linear_backward dweight (no dx)", from_device<float>(d_dw, s.out * s.in), dw_ref,
               0.999, 1e-3);
  }
}
