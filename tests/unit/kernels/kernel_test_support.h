#pragma once
// Shared helpers of the kernel unit tests: seeded random data, error norms and central finite
// differences. Every kernel test compares against a naive double-precision loop written in the
// test itself and checks its backward with finite differences through the double instantiation.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace odc::kernels::test {

template <typename T = double>
std::vector<T> random_vector(std::size_t n, std::uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<T> out(n);
  for (auto& x : out) x = T(dist(rng));
  return out;
}

template <typename To, typename From>
std::vector<To> convert(const std::vector<From>& in) {
  return std::vector<To>(in.begin(), in.end());
}

template <typename A>
double max_abs(const std::vector<A>& a) {
  double m = 0;
  for (const auto& x : a) m = std::max(m, std::fabs(double(x)));
  return m;
}

template <typename A, typename B>
double max_abs_diff(const std::vector<A>& a, const std::vector<B>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    m = std::max(m, std::fabs(double(a[i]) - double(b[i])));
  return m;
}

// max_i |a_i - ref_i| / max_i |ref_i|: the error relative to the scale of the reference, which is
// the meaningful measure when some reference entries are (near) zero.
template <typename A, typename B>
double relative_error(const std::vector<A>& a, const std::vector<B>& ref) {
  const double scale = max_abs(ref);
  return max_abs_diff(a, ref) / (scale > 0 ? scale : 1.0);
}

template <typename A>
double dot(const std::vector<A>& a, const std::vector<A>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += double(a[i]) * double(b[i]);
  return s;
}

// Central differences (loss(x + eps e_i) - loss(x - eps e_i)) / (2 eps) for every i in
// `indices`, in double. Truncation error is O(eps^2) and rounding error about
// 1e-16 * |loss| / eps, both far below 1e-6 of the gradient for eps = 1e-6 and O(1) losses.
template <typename Loss>
std::vector<double> finite_differences(std::vector<double>& x,
                                       const std::vector<std::size_t>& indices, Loss&& loss,
                                       double eps = 1e-6) {
  std::vector<double> grad;
  grad.reserve(indices.size());
  for (std::size_t i : indices) {
    const double saved = x[i];
    x[i] = saved + eps;
    const double plus = loss();
    x[i] = saved - eps;
    const double minus = loss();
    x[i] = saved;
    grad.push_back((plus - minus) / (2 * eps));
  }
  return grad;
}

// 0, stride, 2*stride, ... < n. With a stride coprime to the row length, the sample still covers
// every column and a spread of rows, at a fraction of the cost of all n.
inline std::vector<std::size_t> strided_indices(std::size_t n, std::size_t stride = 1) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < n; i += stride) out.push_back(i);
  return out;
}

template <typename A>
std::vector<double> gather(const std::vector<A>& a, const std::vector<std::size_t>& indices) {
  std::vector<double> out;
  out.reserve(indices.size());
  for (std::size_t i : indices) out.push_back(double(a[i]));
  return out;
}

// Analytic gradient vs central differences on `indices`, as relative_error.
template <typename A, typename Loss>
double gradient_error(const std::vector<A>& analytic, std::vector<double>& x,
                      const std::vector<std::size_t>& indices, Loss&& loss) {
  return relative_error(gather(analytic, indices), finite_differences(x, indices, loss));
}

template <typename A, typename Loss>
double gradient_error(const std::vector<A>& analytic, std::vector<double>& x, Loss&& loss) {
  return gradient_error(analytic, x, strided_indices(x.size()), loss);
}

// Float-vs-double tolerance unit: float's unit roundoff.
inline constexpr double kFloatEps = 5.96e-8;

}  // namespace odc::kernels::test
