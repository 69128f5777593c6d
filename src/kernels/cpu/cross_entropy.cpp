#include "odc/kernels/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "odc/core/error.h"
#include "parallel.h"
#include "vec_math.h"
#include "vec_rows.h"

namespace odc::kernels::cpu {
namespace {

// Writes exp(x - shift) to out (when out != nullptr; out may equal x) and returns the sum of
// those values accumulated in double, so long vocabularies do not lose the small terms.
double exp_shifted_sum_double(const float* x, float* out, std::int64_t n, float shift) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  std::int64_t i = 0;
  for (; i + vec::kLanes <= n; i += vec::kLanes) {
    const vec::f32x4 e = vec::exp(vec::load(x + i) - shift);
    if (out != nullptr) vec::store(out + i, e);
    s0 += e[0];
    s1 += e[1];
    s2 += e[2];
    s3 += e[3];
  }
  for (; i < n; ++i) {
    const float e = vec::exp(x[i] - shift);
    if (out != nullptr) out[i] = e;
    s0 += e;
  }
  return (s0 + s1) + (s2 + s3);
}

double exp_shifted_sum_double(const double* x, double* out, std::int64_t n, double shift) {
  double sum = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double e = std::exp(x[i] - shift);
    if (out != nullptr) out[i] = e;
    sum += e;
  }
  return sum;
}

}  // namespace

template <typename T>
double cross_entropy_forward_backward(const T* logits, const std::int32_t* targets,
                                      const float* weights, std::int64_t rows, std::int64_t vocab,
                                      T* dlogits, T* nll) {
  for (std::int64_t r = 0; r < rows; ++r) {
    ODC_CHECK(weights[r] == 0.0f || (targets[r] >= 0 && targets[r] < vocab),
              "row {} target {} outside vocab {}", r, targets[r], vocab);
  }
  // Rows are independent; the weighted losses are summed afterwards in row order, so the total
  // is the same for any thread count.
  std::vector<double> weighted(static_cast<std::size_t>(rows), 0.0);
  parallel_chunks(rows, 16, [&](std::int64_t row0, std::int64_t row1) {
    for (std::int64_t r = row0; r < row1; ++r) {
      const T* row = logits + r * vocab;
      T* drow = dlogits != nullptr ? dlogits + r * vocab : nullptr;
      const double weight = weights[r];
      if (weight == 0.0) {
        if (nll != nullptr) nll[r] = T(0);
        if (drow != nullptr) std::fill(drow, drow + vocab, T(0));
        continue;
      }
      const std::int32_t target = targets[r];
      // Read before the (possibly aliasing) gradient overwrites the row.
      const double target_logit = double(row[target]);
      const T max = vec::max_of(row, vocab);
      const double sum = exp_shifted_sum_double(row, drow, vocab, max);
      const double row_nll = double(max) + std::log(sum) - target_logit;
      weighted[static_cast<std::size_t>(r)] = weight * row_nll;
      if (nll != nullptr) nll[r] = T(row_nll);
      if (drow != nullptr) {
        vec::scale(drow, vocab, T(weight / sum));
        drow[target] -= T(weight);
      }
    }
  });
  double total = 0;
  for (const double w : weighted) total += w;
  return total;
}

template double cross_entropy_forward_backward<float>(const float*, const std::int32_t*,
                                                      const float*, std::int64_t, std::int64_t,
                                                      float*, float*);
template double cross_entropy_forward_backward<double>(const double*, const std::int32_t*,
                                                       const float*, std::int64_t, std::int64_t,
                                                       double*, double*);

}  // namespace odc::kernels::cpu
