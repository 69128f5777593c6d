#include "odc/kernels/adamw.h"

#include <cmath>
#include <type_traits>
#include <vector>

#include "odc/core/error.h"
#include "adamw_loop.h"
#include "parallel.h"
#include "vec_rows.h"

namespace odc::kernels::cpu {

// The per-step scalars are formed in double, as torch does on the host, then applied in T.
template <typename T>
void adamw_step(T* param, const T* grad, T* exp_avg, T* exp_avg_sq, std::int64_t n,
                const AdamWParams& params) {
  ODC_CHECK(params.step >= 1, "AdamW step counts from 1, got {}", params.step);
  const double bias_correction1 = 1.0 - std::pow(params.beta1, double(params.step));
  const double bias_correction2 = 1.0 - std::pow(params.beta2, double(params.step));
  // Element-wise (adamw_loop.h) in pieces for the compute threads, the same operations for every
  // element whatever the piece: the same result for any thread count; float through the AVX2
  // variant of vec_rows.cpp where the CPU has it, with the same bits.
  const AdamWCoefficients<T> s{T(1.0 - params.lr * params.weight_decay),
                               T(params.beta1),
                               T(1.0 - params.beta1),
                               T(params.beta2),
                               T(1.0 - params.beta2),
                               T(params.lr / bias_correction1),
                               T(1.0 / std::sqrt(bias_correction2)),
                               T(params.eps),
                               T(params.grad_scale)};
  parallel_chunks(n, 32768, [&](std::int64_t begin, std::int64_t end) {
    if constexpr (std::is_same_v<T, float>) {
      rows::adamw_update(param + begin, grad + begin, exp_avg + begin, exp_avg_sq + begin, end - begin, s);
    } else {
      adamw_elements(param + begin, grad + begin, exp_avg + begin, exp_avg_sq + begin, end - begin, s);
    }
  });
}

namespace {

// Double keeps the norm exact enough for clipping decisions over billions of elements. Float: the
// 8-lane row kernel (AVX2 where the CPU has it); double: four partial sums break the add latency
// chain.
template <typename T>
double sum_of_squares_piece(const T* x, std::int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    return rows::sum_of_squares(x, n);
  } else {
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    std::int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
      s0 += double(x[i]) * double(x[i]);
      s1 += double(x[i + 1]) * double(x[i + 1]);
      s2 += double(x[i + 2]) * double(x[i + 2]);
      s3 += double(x[i + 3]) * double(x[i + 3]);
    }
    for (; i < n; ++i) s0 += double(x[i]) * double(x[i]);
    return (s0 + s1) + (s2 + s3);
  }
}

constexpr std::int64_t kSquaresGrain = 65536;

}  // namespace

template <typename T>
double sum_of_squares(const T* x, std::int64_t n) {
  // Long vectors (the gradient norm) in fixed pieces over the compute threads, summed in piece
  // order: the same value for any thread count. A row (RMSNorm) is a single piece.
  if (n <= kSquaresGrain) return sum_of_squares_piece(x, n);
  const std::int64_t pieces = (n + kSquaresGrain - 1) / kSquaresGrain;
  std::vector<double> partial(static_cast<std::size_t>(pieces));
  parallel_chunks(n, kSquaresGrain, [&](std::int64_t begin, std::int64_t end) {
    partial[static_cast<std::size_t>(begin / kSquaresGrain)] = sum_of_squares_piece(x + begin, end - begin);
  });
  double total = 0;
  for (const double p : partial) total += p;
  return total;
}

template void adamw_step<float>(float*, const float*, float*, float*, std::int64_t,
                                const AdamWParams&);
template void adamw_step<double>(double*, const double*, double*, double*, std::int64_t,
                                 const AdamWParams&);
template double sum_of_squares<float>(const float*, std::int64_t);
template double sum_of_squares<double>(const double*, std::int64_t);

}  // namespace odc::kernels::cpu
