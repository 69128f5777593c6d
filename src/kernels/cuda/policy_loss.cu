// The clipped policy objective's kernels (cuda_policy_loss.h): row entropies of bf16 logits, and
// the rows' coefficients with their sums in a fixed order.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "odc/core/error.h"
#include "odc/kernels/cuda_device.h"
#include "odc/kernels/cuda_policy_loss.h"

namespace odc::kernels::cuda {
namespace {

constexpr int kEntropyThreads = 512;  // per row (a power of two: the tree reductions halve it)
constexpr int kVecElems = 8;          // bf16 per 16-byte load
constexpr int kCoefThreads = 128;     // a power of two
constexpr int kCoefBlocks = 64;       // fixed: the sums' order depends only on the row count
constexpr int kFields = kPolicySumFields;

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

// ---- row entropy ----

// A thread's entropy statistics over its elements x, relative to their maximum m:
// s = sum exp(x - m), t = sum exp(x - m) * (x - m). The exponentials are fp32 (each within a few
// ulp), the sums double, so a row's sums carry the exponentials' error and hardly any rounding of
// their own.
struct EntropyStats {
  float m = -INFINITY;  // -inf: no element yet (s == t == 0)
  double s = 0.0;
  double t = 0.0;
};

// Moves the statistics to a maximum m_new >= m. The factor is a double exp: a thread may meet many
// new maxima (rising logits), and an fp32 factor's error would add up at each.
__device__ __forceinline__ void rebase(EntropyStats& st, float m_new) {
  if (st.m != -INFINITY) {
    const double shift = static_cast<double>(st.m) - static_cast<double>(m_new);  // <= 0, exact
    const double f = exp(shift);
    st.t = f * (st.t + st.s * shift);
    st.s *= f;
  }
  st.m = m_new;
}

__device__ __forceinline__ void add_group(EntropyStats& st, const float* v, int n) {
  float group_max = v[0];
  for (int e = 1; e < n; ++e) group_max = fmaxf(group_max, v[e]);
  if (group_max == -INFINITY) return;
  if (group_max > st.m) rebase(st, group_max);
  for (int e = 0; e < n; ++e) {
    const float shifted = v[e] - st.m;
    const float p = expf(shifted);
    st.s += p;
    st.t += static_cast<double>(p) * static_cast<double>(shifted);  // an exact product
  }
}

// One block per row. kVec: vocab % 8 == 0 and the logits 16-byte aligned (uint4 loads). The
// threads' statistics are rebased to the row's maximum, then summed in a fixed tree.
template <bool kVec>
__global__ void __launch_bounds__(kEntropyThreads)
    row_entropy_kernel(const __nv_bfloat16* logits, std::int64_t vocab, float* out) {
  __shared__ float part_m[kEntropyThreads];
  __shared__ double part_s[kEntropyThreads];
  __shared__ double part_t[kEntropyThreads];
  const std::int64_t row = blockIdx.x;
  const __nv_bfloat16* x = logits + row * vocab;
  EntropyStats st;
  if constexpr (kVec) {
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    for (std::int64_t i = threadIdx.x; i < vocab / kVecElems; i += blockDim.x) {
      const uint4 packed = xv[i];
      const auto* pairs = reinterpret_cast<const __nv_bfloat162*>(&packed);
      float v[kVecElems];
#pragma unroll
      for (int q = 0; q < kVecElems / 2; ++q) {
        const float2 f = __bfloat1622float2(pairs[q]);
        v[2 * q] = f.x;
        v[2 * q + 1] = f.y;
      }
      add_group(st, v, kVecElems);
    }
  } else {
    for (std::int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
      const float v = __bfloat162float(x[j]);
      add_group(st, &v, 1);
    }
  }
  const int tid = static_cast<int>(threadIdx.x);
  part_m[tid] = st.m;
  __syncthreads();
  for (int stride = kEntropyThreads / 2; stride > 0; stride >>= 1) {
    if (tid < stride) part_m[tid] = fmaxf(part_m[tid], part_m[tid + stride]);
    __syncthreads();
  }
  const float top = part_m[0];
  if (top != -INFINITY) rebase(st, top);
  part_s[tid] = st.s;
  part_t[tid] = st.t;
  __syncthreads();
  for (int stride = kEntropyThreads / 2; stride > 0; stride >>= 1) {
    if (tid < stride) {
      part_s[tid] += part_s[tid + stride];
      part_t[tid] += part_t[tid + stride];
    }
    __syncthreads();
  }
  // H = log s - t / s (the shift cancels), as cpu::row_entropy.
  if (tid == 0) out[row] = static_cast<float>(log(part_s[0]) - part_t[0] / part_s[0]);
}

// ---- policy coefficients ----

struct CoefParams {
  double low, high;  // the ratio's clip range [1 - clip_low, 1 + clip_high]
  double kl_beta;
  double temperature;
  bool kl_ratio_weighted;
};

// The fields' identities: +inf for the minimum, -inf for the maximum, 0 for the sums.
__device__ __forceinline__ double identity(int f) {
  return f == kPolicyRatioMin ? INFINITY : (f == kPolicyRatioMax ? -INFINITY : 0.0);
}

// into[f] (+)= from[f]; the minimum and maximum as std::min and std::max.
__device__ __forceinline__ void merge_fields(double* into, const double* from) {
#pragma unroll
  for (int f = 0; f < kFields; ++f) {
    if (f == kPolicyRatioMin) {
      into[f] = from[f] < into[f] ? from[f] : into[f];
    } else if (f == kPolicyRatioMax) {
      into[f] = into[f] < from[f] ? from[f] : into[f];
    } else {
      into[f] += from[f];
    }
  }
}

// Merges every thread's v over the block in a fixed tree; thread 0 gets the result.
__device__ void block_merge(double* v) {
  __shared__ double part[kFields][kCoefThreads];
  const int tid = static_cast<int>(threadIdx.x);
#pragma unroll
  for (int f = 0; f < kFields; ++f) part[f][tid] = v[f];
  __syncthreads();
  for (int stride = kCoefThreads / 2; stride > 0; stride >>= 1) {
    if (tid < stride) {
      double other[kFields];
#pragma unroll
      for (int f = 0; f < kFields; ++f) other[f] = part[f][tid + stride];
      merge_fields(v, other);
#pragma unroll
      for (int f = 0; f < kFields; ++f) part[f][tid] = v[f];
    }
    __syncthreads();
  }
}

// cpu::policy_coefficients row by row, operation for operation: __dmul_rn / __dadd_rn where a
// product meets a sum, so the compiler fuses no multiply-add the host does not. Each block writes
// its partial sums (kFields doubles) to partials[blockIdx.x].
__global__ void __launch_bounds__(kCoefThreads)
    policy_coefficients_kernel(const float* nll, const float* old_logp, const float* advantages,
                               const float* ref_logp, const float* weights, const float* entropy,
                               std::int64_t rows, CoefParams p, float* coef, double* partials) {
  double acc[kFields];
#pragma unroll
  for (int f = 0; f < kFields; ++f) acc[f] = identity(f);
  for (std::int64_t r = blockIdx.x * static_cast<std::int64_t>(kCoefThreads) + threadIdx.x; r < rows;
       r += static_cast<std::int64_t>(kCoefBlocks) * kCoefThreads) {
    const double w = weights[r];
    if (w == 0.0) {
      coef[r] = 0.0f;
      continue;
    }
    const double logp = -static_cast<double>(nll[r]);
    const double a = advantages[r];
    const double ratio = exp(logp - static_cast<double>(old_logp[r]));
    const double clipped = ratio < p.low ? p.low : (p.high < ratio ? p.high : ratio);  // std::clamp
    const double unclipped_term = __dmul_rn(ratio, a);
    const double clipped_term = __dmul_rn(clipped, a);
    const bool unclipped_min = unclipped_term <= clipped_term;
    double loss = -(clipped_term < unclipped_term ? clipped_term : unclipped_term);  // -std::min
    double slope = unclipped_min ? -unclipped_term : 0.0;
    if (ref_logp != nullptr) {
      const double d = static_cast<double>(ref_logp[r]) - logp;
      const double k3 = exp(d) - d - 1.0;
      const double dk3 = 1.0 - exp(d);
      const double kl = p.kl_ratio_weighted ? __dmul_rn(ratio, k3) : k3;
      acc[kPolicyKl] += kl;
      loss = __dadd_rn(loss, __dmul_rn(p.kl_beta, kl));
      slope = __dadd_rn(slope, __dmul_rn(p.kl_beta, p.kl_ratio_weighted ? __dmul_rn(ratio, k3 + dk3) : dk3));
    }
    float c = static_cast<float>(-w * slope);
    if (p.temperature != 1.0) c = static_cast<float>(static_cast<double>(c) / p.temperature);
    coef[r] = c;
    acc[kPolicyNll] += nll[r];
    if (entropy != nullptr) acc[kPolicyEntropy] += entropy[r];
    acc[kPolicyLoss] = __dadd_rn(acc[kPolicyLoss], __dmul_rn(w, loss));
    acc[kPolicyTokens] += 1.0;
    acc[kPolicyRatio] += ratio;
    acc[kPolicyRatioMin] = ratio < acc[kPolicyRatioMin] ? ratio : acc[kPolicyRatioMin];
    acc[kPolicyRatioMax] = acc[kPolicyRatioMax] < ratio ? ratio : acc[kPolicyRatioMax];
    if (ratio < p.low && a < 0) acc[kPolicyClippedLow] += 1.0;
    if (ratio > p.high && a > 0) acc[kPolicyClippedHigh] += 1.0;
  }
  block_merge(acc);
  if (threadIdx.x == 0) {
#pragma unroll
    for (int f = 0; f < kFields; ++f) partials[blockIdx.x * kFields + f] = acc[f];
  }
}

// One block: the chunk's partials merged in a fixed order, then added into the accumulator (whose
// minimum and maximum are unset while it holds no tokens).
__global__ void __launch_bounds__(kCoefThreads) policy_sums_kernel(const double* partials, double* accumulator) {
  double acc[kFields];
#pragma unroll
  for (int f = 0; f < kFields; ++f) acc[f] = identity(f);
  for (int b = static_cast<int>(threadIdx.x); b < kCoefBlocks; b += kCoefThreads) {
    merge_fields(acc, partials + b * kFields);
  }
  block_merge(acc);
  if (threadIdx.x == 0) {
    if (accumulator[kPolicyTokens] == 0.0) {
      accumulator[kPolicyRatioMin] = INFINITY;
      accumulator[kPolicyRatioMax] = -INFINITY;
    }
    merge_fields(accumulator, acc);
  }
}

}  // namespace

void row_entropy(const std::uint16_t* logits, std::int64_t rows, std::int64_t vocab, float* out, void* stream) {
  ODC_CHECK(rows >= 0 && vocab > 0, "cuda row_entropy: {} rows of vocab {}", rows, vocab);
  ODC_CHECK(rows <= 0x7fffffff, "cuda row_entropy: {} rows exceed the grid limit", rows);
  if (rows == 0) return;
  const auto* x = reinterpret_cast<const __nv_bfloat16*>(logits);
  const bool vec = vocab % kVecElems == 0 && reinterpret_cast<std::uintptr_t>(logits) % 16 == 0;
  if (vec) {
    row_entropy_kernel<true><<<static_cast<unsigned>(rows), kEntropyThreads, 0, as_stream(stream)>>>(x, vocab, out);
  } else {
    row_entropy_kernel<false><<<static_cast<unsigned>(rows), kEntropyThreads, 0, as_stream(stream)>>>(x, vocab, out);
  }
  check_last_launch("row_entropy_kernel");
}

std::int64_t policy_coefficients_scratch() { return std::int64_t{kCoefBlocks} * kFields; }

void policy_coefficients(const float* nll, const float* old_logp, const float* advantages, const float* ref_logp,
                         const float* weights, const float* entropy, std::int64_t rows, const PolicyLossParams& params,
                         float* coef, double* scratch, double* accumulator, void* stream) {
  // cpu::policy_coefficients' checks.
  ODC_CHECK(params.clip_low >= 0 && params.clip_low < 1 && params.clip_high >= 0,
            "cuda policy_coefficients: clip range [1 - {}, 1 + {}]", params.clip_low, params.clip_high);
  ODC_CHECK(params.kl_beta == 0.0 || ref_logp != nullptr,
            "cuda policy_coefficients: a KL penalty without reference log-probabilities");
  ODC_CHECK(params.temperature > 0, "cuda policy_coefficients: temperature {}", params.temperature);
  ODC_CHECK(rows >= 0, "cuda policy_coefficients: negative row count {}", rows);
  if (rows == 0) return;
  const CoefParams p{1.0 - params.clip_low, 1.0 + params.clip_high, params.kl_beta, params.temperature,
                     params.kl_ratio_weighted};
  policy_coefficients_kernel<<<kCoefBlocks, kCoefThreads, 0, as_stream(stream)>>>(
      nll, old_logp, advantages, ref_logp, weights, entropy, rows, p, coef, scratch);
  check_last_launch("policy_coefficients_kernel");
  policy_sums_kernel<<<1, kCoefThreads, 0, as_stream(stream)>>>(scratch, accumulator);
  check_last_launch("policy_sums_kernel");
}

}  // namespace odc::kernels::cuda
