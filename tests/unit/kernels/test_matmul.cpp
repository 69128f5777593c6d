// GEMM and linear layers: float against naive double loops, backward against central finite
// differences in double.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "odc/kernels/matmul.h"
#include "unit/kernels/kernel_test_support.h"

namespace {

using namespace odc::kernels::cpu;
using namespace odc::kernels::test;

// C = alpha op(A) op(B) + beta C with explicit strides, entry by entry.
void reference_gemm(bool ta, bool tb, int m, int n, int k, double alpha,
                    const std::vector<double>& a, int lda, const std::vector<double>& b, int ldb,
                    double beta, std::vector<double>& c, int ldc) {
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double acc = 0;
      for (int p = 0; p < k; ++p) {
        const double av = ta ? a[p * lda + i] : a[i * lda + p];
        const double bv = tb ? b[j * ldb + p] : b[p * ldb + j];
        acc += av * bv;
      }
      c[i * ldc + j] = alpha * acc + beta * c[i * ldc + j];
    }
  }
}

void reference_linear(const std::vector<double>& x, const std::vector<double>& w,
                      const std::vector<double>* bias, std::vector<double>& y, int rows, int in,
                      int out) {
  y.assign(std::size_t(rows * out), 0.0);
  for (int r = 0; r < rows; ++r) {
    for (int o = 0; o < out; ++o) {
      double acc = bias != nullptr ? (*bias)[o] : 0.0;
      for (int i = 0; i < in; ++i) acc += x[r * in + i] * w[o * in + i];
      y[r * out + o] = acc;
    }
  }
}

}  // namespace

TEST_CASE("gemm matches the naive product for every transpose and padded strides",
          "[kernels][matmul]") {
  const int m = 13, n = 17, k = 37;
  const double alpha = 0.75, beta = -1.5;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      CAPTURE(ta, tb);
      // Stored shapes: A is m x k (k x m when transposed), B is k x n (n x k); each row padded by
      // 3 elements so that the strides, not the logical widths, must be used.
      const int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 3, ldc = n + 3;
      const auto a = random_vector((ta ? k : m) * lda, 1);
      const auto b = random_vector((tb ? n : k) * ldb, 2);
      auto c_ref = random_vector(m * ldc, 3);
      auto c_f = convert<float>(c_ref);
      auto c_d = c_ref;
      const auto a_f = convert<float>(a), b_f = convert<float>(b);
      gemm<float>(ta, tb, m, n, k, float(alpha), a_f.data(), lda, b_f.data(), ldb, float(beta),
                  c_f.data(), ldc);
      gemm<double>(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c_d.data(), ldc);
      reference_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c_ref, ldc);
      // Float: |error| <= k * eps * sum |a||b| in the worst case; random signs make it ~sqrt(k)
      // eps. 37 products of magnitude <= 1: 1e-5 relative to max |C| (~ 4) is a safe bound.
      CHECK(relative_error(c_f, c_ref) < 1e-5);
      CHECK(relative_error(c_d, c_ref) < 1e-14);
      // Padding columns of C are left alone.
      const auto c_orig = random_vector(m * ldc, 3);
      for (int i = 0; i < m; ++i) {
        for (int j = n; j < ldc; ++j) CHECK(c_d[i * ldc + j] == c_orig[i * ldc + j]);
      }
    }
  }
}

TEST_CASE("gemm with k = 0 scales C by beta, and beta = 0 ignores C's old values",
          "[kernels][matmul]") {
  std::vector<double> c = {1, 2, 3, 4};
  gemm<double>(false, false, 2, 2, 0, 1.0, nullptr, 1, nullptr, 2, 0.5, c.data(), 2);
  CHECK(c == std::vector<double>{0.5, 1, 1.5, 2});
  gemm<double>(false, false, 2, 2, 0, 1.0, nullptr, 1, nullptr, 2, 0.0, c.data(), 2);
  CHECK(c == std::vector<double>{0, 0, 0, 0});
  // BLAS semantics: beta = 0 overwrites, so NaN garbage in C must not leak through.
  std::vector<float> cf(4, std::nanf(""));
  const std::vector<float> a = {1, 2}, b = {3, 4};
  gemm<float>(false, false, 2, 2, 1, 1.0f, a.data(), 1, b.data(), 2, 0.0f, cf.data(), 2);
  CHECK(cf == std::vector<float>{3, 4, 6, 8});
}

TEST_CASE("linear_forward matches x W^T + b", "[kernels][matmul]") {
  const int rows = 9, in = 33, out = 20;
  const auto x = random_vector(rows * in, 10), w = random_vector(out * in, 11);
  const auto bias = random_vector(out, 12);
  for (bool with_bias : {false, true}) {
    CAPTURE(with_bias);
    std::vector<double> ref;
    reference_linear(x, w, with_bias ? &bias : nullptr, ref, rows, in, out);
    const auto xf = convert<float>(x), wf = convert<float>(w), bf = convert<float>(bias);
    std::vector<float> yf(rows * out, std::nanf(""));
    linear_forward<float>(xf.data(), wf.data(), with_bias ? bf.data() : nullptr, yf.data(), rows,
                          in, out);
    // 33-term dot products of values in [-1, 1]: see the gemm bound.
    CHECK(relative_error(yf, ref) < 1e-5);
  }
}

TEST_CASE("linear_backward matches central finite differences in double", "[kernels][matmul]") {
  const int rows = 7, in = 11, out = 5;
  auto x = random_vector(rows * in, 20), w = random_vector(out * in, 21);
  auto bias = random_vector(out, 22);
  const auto dy = random_vector(rows * out, 23);  // loss = sum(y * dy)
  auto loss = [&] {
    std::vector<double> y(rows * out);
    linear_forward<double>(x.data(), w.data(), bias.data(), y.data(), rows, in, out);
    return dot(y, dy);
  };
  // dweight and dbias accumulate: start them from known values and subtract afterwards.
  const auto dw0 = random_vector(out * in, 24), db0 = random_vector(out, 25);
  auto dw = dw0, db = db0;
  std::vector<double> dx(rows * in, std::nan(""));
  linear_backward<double>(dy.data(), x.data(), w.data(), dx.data(), dw.data(), db.data(), rows, in,
                          out, false);
  for (std::size_t i = 0; i < dw.size(); ++i) dw[i] -= dw0[i];
  for (std::size_t i = 0; i < db.size(); ++i) db[i] -= db0[i];
  CHECK(gradient_error(dx, x, loss) < 1e-6);
  CHECK(gradient_error(dw, w, loss) < 1e-6);
  CHECK(gradient_error(db, bias, loss) < 1e-6);

  SECTION("dx_accumulate adds to dx; dx and dbias may be omitted") {
    auto dx_acc = random_vector(rows * in, 26);
    const auto dx_before = dx_acc;
    std::vector<double> dw2(out * in, 0.0);
    linear_backward<double>(dy.data(), x.data(), w.data(), dx_acc.data(), dw2.data(), nullptr, rows,
                            in, out, true);
    for (std::size_t i = 0; i < dx_acc.size(); ++i) {
      CHECK(dx_acc[i] == Approx(dx_before[i] + dx[i]).margin(1e-14));
    }
    std::vector<double> dw3(out * in, 0.0);
    linear_backward<double>(dy.data(), x.data(), w.data(), nullptr, dw3.data(), nullptr, rows, in,
                            out, false);
    CHECK(max_abs_diff(dw3, dw) < 1e-14);
  }
}

TEST_CASE("set_num_threads controls the BLAS thread count", "[kernels][matmul]") {
  const int before = num_threads();
  set_num_threads(1);
  CHECK(num_threads() == 1);
  set_num_threads(before);
  CHECK(num_threads() == before);
  CHECK_THROWS(set_num_threads(0));
}
