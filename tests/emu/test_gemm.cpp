// gemm.cu through the emulated cuBLASLt (tests/emu/include/cublasLt.h: a checked reference
// matmul): its row-major -> column-major mapping (operand swap, transpose flags, leading
// dimensions), the k == 0 path, the bias epilogue and linear_backward's column sums.
//
// The reference matmul accumulates in double and rounds once, so the only rounding is the
// output's: bf16 within 2^-8 relative (+1e-6), f32 within 1e-5 relative of the sum of |terms|.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "emu_test_support.h"
#include "odc/core/error.h"
#include "cublasLt.h"  // the emulated cuBLASLt (tests/emu/include)
#include "odc/kernels/cuda_gemm.h"

namespace kc = odc::kernels::cuda;
using odc_emu_test::Bf16Data;
using odc_emu_test::from_bf16;
using odc_emu_test::random_bf16;

namespace {

// Row-major element (r, c) of op(X), X stored with leading dimension ld.
double op_at(const std::vector<double>& x, bool trans, std::int64_t ld, std::int64_t r, std::int64_t c) {
  return trans ? x[c * ld + r] : x[r * ld + c];
}

}  // namespace

TEST_CASE("emu gemm: transposes, padded leading dimensions, f32/bf16 out, beta 0 and 0.5", "[emu][gemm]") {
  kc::Blas blas(0);
  const std::int64_t m = 37, n = 29, k = 45;
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      for (const auto out : {kc::GemmOut::f32, kc::GemmOut::bf16}) {
        for (const float beta : {0.0f, 0.5f}) {
          const std::int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 5, ldc = n + 2;
          const Bf16Data a = random_bf16(static_cast<std::size_t>((ta ? k : m) * lda), 1.0f, 1);
          const Bf16Data b = random_bf16(static_cast<std::size_t>((tb ? n : k) * ldb), 1.0f, 2);
          const Bf16Data c0 = random_bf16(static_cast<std::size_t>(m * ldc), 1.0f, 3);
          std::vector<float> cf(m * ldc);
          std::vector<std::uint16_t> cb(m * ldc);
          for (std::int64_t i = 0; i < m * ldc; ++i) {
            // beta 0: C must not be read (NaN there must not survive).
            cf[i] = beta == 0.0f ? NAN : static_cast<float>(c0.values[i]);
            cb[i] = beta == 0.0f ? 0x7fc0 : c0.bits[i];
          }
          void* c = out == kc::GemmOut::f32 ? static_cast<void*>(cf.data()) : static_cast<void*>(cb.data());
          kc::gemm(blas, ta, tb, m, n, k, 1.5f, a.bits.data(), lda, b.bits.data(), ldb, beta, c, ldc, out, nullptr);
          int bad = 0;
          for (std::int64_t r = 0; r < m; ++r) {
            for (std::int64_t j = 0; j < n; ++j) {
              double want = 0.0, mag = 0.0;
              for (std::int64_t q = 0; q < k; ++q) {
                const double t = op_at(a.values, ta, lda, r, q) * op_at(b.values, tb, ldb, q, j);
                want += t;
                mag += std::fabs(t);
              }
              want = 1.5 * want + (beta == 0.0f ? 0.0 : 0.5 * c0.values[r * ldc + j]);
              const double got = out == kc::GemmOut::f32 ? cf[r * ldc + j] : from_bf16(cb[r * ldc + j]);
              const double tol = out == kc::GemmOut::f32 ? 1e-5 * (1.5 * mag + 1.0) : 0x1p-8 * std::fabs(want) + 1e-6;
              bad += !(std::fabs(got - want) <= tol);
            }
            // Padding columns of C are never written.
            for (std::int64_t j = n; j < ldc; ++j) {
              bad += out == kc::GemmOut::f32 ? !(std::isnan(cf[r * ldc + j]) || cf[r * ldc + j] == static_cast<float>(c0.values[r * ldc + j]))
                                             : cb[r * ldc + j] != (beta == 0.0f ? 0x7fc0 : c0.bits[r * ldc + j]);
            }
          }
          INFO("trans_a " << ta << " trans_b " << tb << " f32 " << (out == kc::GemmOut::f32) << " beta " << beta);
          CHECK(bad == 0);
        }
      }
    }
  }
  CHECK(blas.cached_plans() == 8);  // one plan per (transposes, output type); beta is not a key
}

TEST_CASE("emu gemm: k == 0 scales C by beta (0 clears NaN)", "[emu][gemm]") {
  kc::Blas blas(0);
  std::vector<float> c = {1.0f, NAN, 3.0f, 4.0f};
  kc::gemm(blas, false, false, 2, 2, 0, 1.0f, nullptr, 1, nullptr, 2, 0.0f, c.data(), 2, kc::GemmOut::f32, nullptr);
  CHECK(c == std::vector<float>{0, 0, 0, 0});
  std::vector<float> d = {1.0f, 2.0f, 3.0f, 4.0f};
  kc::gemm(blas, false, false, 2, 2, 0, 1.0f, nullptr, 1, nullptr, 2, 2.0f, d.data(), 2, kc::GemmOut::f32, nullptr);
  CHECK(d == std::vector<float>{2, 4, 6, 8});
}

TEST_CASE("emu gemm: linear forward with bias, backward with dx, dweight and dbias accumulation", "[emu][gemm]") {
  kc::Blas blas(1 << 20);
  const std::int64_t rows = 70, in = 24, out = 300;  // dbias over two 64-row chunks, 2 column blocks
  const Bf16Data x = random_bf16(rows * in, 1.0f, 4), w = random_bf16(out * in, 1.0f, 5),
                 bias = random_bf16(out, 1.0f, 6), dy = random_bf16(rows * out, 1.0f, 7),
                 dx0 = random_bf16(rows * in, 1.0f, 8);
  std::vector<std::uint16_t> y(rows * out);
  kc::linear_forward(blas, x.bits.data(), w.bits.data(), bias.bits.data(), y.data(), rows, in, out, nullptr);
  std::vector<std::uint16_t> dx = dx0.bits;
  std::vector<float> dw(out * in, 0.5f), db(out, -1.0f);
  kc::DeviceAllocator allocator;  // the dbias scratch
  kc::linear_backward(blas, dy.bits.data(), x.bits.data(), w.bits.data(), dx.data(), dw.data(),
                      db.data(), rows, in, out, true, allocator, nullptr);
  int bad = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t o = 0; o < out; ++o) {
      double want = bias.values[o];
      for (std::int64_t i = 0; i < in; ++i) want += x.values[r * in + i] * w.values[o * in + i];
      bad += !(std::fabs(from_bf16(y[r * out + o]) - want) <= 0x1p-8 * std::fabs(want) + 1e-6);
    }
    for (std::int64_t i = 0; i < in; ++i) {
      double want = dx0.values[r * in + i];
      for (std::int64_t o = 0; o < out; ++o) want += dy.values[r * out + o] * w.values[o * in + i];
      bad += !(std::fabs(from_bf16(dx[r * in + i]) - want) <= 0x1p-8 * std::fabs(want) + 1e-6);
    }
  }
  for (std::int64_t o = 0; o < out; ++o) {
    double want_b = -1.0;
    for (std::int64_t r = 0; r < rows; ++r) want_b += dy.values[r * out + o];
    bad += !(std::fabs(db[o] - want_b) <= 1e-4);  // fp32 sums of 70 terms of magnitude <= 1
    for (std::int64_t i = 0; i < in; ++i) {
      double want = 0.5;
      for (std::int64_t r = 0; r < rows; ++r) want += dy.values[r * out + o] * x.values[r * in + i];
      bad += !(std::fabs(dw[o * in + i] - want) <= 1e-4);
    }
  }
  CHECK(bad == 0);
}

TEST_CASE("emu gemm: the residual in the epilogue equals copy + add bitwise, and leaves the residual", "[emu][gemm]") {
  kc::Blas blas(0);
  for (const std::int64_t in : {std::int64_t{0}, std::int64_t{48}}) {
    CAPTURE(in);
    const std::int64_t rows = 19, out = 40;
    const Bf16Data x = random_bf16(static_cast<std::size_t>(rows * std::max<std::int64_t>(in, 1)), 1.0f, 11);
    const Bf16Data w = random_bf16(static_cast<std::size_t>(out * std::max<std::int64_t>(in, 1)), 1.0f, 12);
    const Bf16Data residual = random_bf16(static_cast<std::size_t>(rows * out), 1.0f, 13);
    // The reference: the residual copied into y, then y += x W^T (beta 1 onto y).
    std::vector<std::uint16_t> added = residual.bits;
    kc::gemm(blas, false, true, rows, out, in, 1.0f, x.bits.data(), std::max<std::int64_t>(in, 1), w.bits.data(),
             std::max<std::int64_t>(in, 1), 1.0f, added.data(), out, kc::GemmOut::bf16, nullptr);
    std::vector<std::uint16_t> y(static_cast<std::size_t>(rows * out), 0x7fc0);  // NaN: must be overwritten
    std::vector<std::uint16_t> kept = residual.bits;
    kc::linear_forward_residual(blas, x.bits.data(), w.bits.data(), kept.data(), y.data(), rows,
                                in, out, nullptr);
    CHECK(y == added);
    CHECK(kept == residual.bits);
    // In place (y is the residual) it is linear_forward_add.
    kc::linear_forward_residual(blas, x.bits.data(), w.bits.data(), kept.data(), kept.data(), rows, in, out, nullptr);
    CHECK(kept == added);
  }
}

TEST_CASE("emu gemm: a leading dimension below the row length is an error", "[emu][gemm]") {
  kc::Blas blas(0);
  std::vector<std::uint16_t> a(64), b(64);
  std::vector<float> c(64);
  CHECK_THROWS_AS(kc::gemm(blas, false, false, 4, 4, 4, 1.0f, a.data(), 3, b.data(), 4, 0.0f, c.data(), 4,
                           kc::GemmOut::f32, nullptr),
                  odc::Error);
}

TEST_CASE("emu cuBLASLt: what the reference rejects (so gemm.cu's calls are checked)", "[emu][gemm]") {
  // Column-major layouts need ld >= rows.
  cublasLtMatrixLayout_t layout = nullptr;
  CHECK(cublasLtMatrixLayoutCreate(&layout, CUDA_R_16BF, 8, 4, 7) == CUBLAS_STATUS_INVALID_VALUE);
  REQUIRE(cublasLtMatrixLayoutCreate(&layout, CUDA_R_16BF, 8, 4, 8) == CUBLAS_STATUS_SUCCESS);
  // Attributes must come with their exact size.
  cublasLtMatmulDesc_t desc = nullptr;
  REQUIRE(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
  const std::int64_t wide = CUBLAS_OP_T;
  CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &wide, sizeof(wide)) ==
        CUBLAS_STATUS_INVALID_VALUE);
  // Shapes must chain: op(A) 8x4 times op(B) 8x4 does not.
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtMatrixLayout_t c = nullptr;
  REQUIRE(cublasLtCreate(&handle) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasLtMatrixLayoutCreate(&c, CUDA_R_32F, 8, 4, 8) == CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  CHECK(cublasLtMatmulAlgoGetHeuristic(handle, desc, layout, layout, c, c, pref, 1, &result, &returned) ==
        CUBLAS_STATUS_INVALID_VALUE);
  // A pointer less aligned than the preference promised (the default: 256 bytes) is refused.
  const cublasOperation_t t = CUBLAS_OP_T;
  REQUIRE(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)) == CUBLAS_STATUS_SUCCESS);
  cublasLtMatrixLayout_t b = nullptr;
  REQUIRE(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, 8, 4, 8) == CUBLAS_STATUS_SUCCESS);
  cublasLtMatrixLayout_t c4 = nullptr;
  REQUIRE(cublasLtMatrixLayoutCreate(&c4, CUDA_R_32F, 4, 4, 4) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasLtMatmulAlgoGetHeuristic(handle, desc, layout, b, c4, c4, pref, 1, &result, &returned) ==
          CUBLAS_STATUS_SUCCESS);
  alignas(256) std::uint16_t ab[64] = {};
  alignas(256) float out[32] = {};
  const float one = 1.0f, zero = 0.0f;
  CHECK(cublasLtMatmul(handle, desc, &one, ab, layout, ab, b, &zero, out, c4, out, c4, &result.algo, nullptr, 0,
                       nullptr) == CUBLAS_STATUS_SUCCESS);
  CHECK(cublasLtMatmul(handle, desc, &one, ab + 8, layout, ab, b, &zero, out, c4, out, c4, &result.algo, nullptr,
                       0, nullptr) == CUBLAS_STATUS_INVALID_VALUE);
  for (auto* l : {layout, c, b, c4}) cublasLtMatrixLayoutDestroy(l);
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatmulDescDestroy(desc);
  cublasLtDestroy(handle);
}
