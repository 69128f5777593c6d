// Weighted softmax cross-entropy and the fused, chunked LM head + cross-entropy
// (cuda_cross_entropy.h).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "odc/core/error.h"
#include "odc/kernels/cuda_cross_entropy.h"
#include "odc/kernels/cuda_device.h"
#include "odc/kernels/cuda_gemm.h"

namespace odc::kernels::cuda {
namespace {

constexpr int kCeThreads = 512;    // per row (a multiple of 32)
constexpr int kSumThreads = 1024;  // sum_f64: one block
constexpr int kVecElems = 8;       // bf16 per 16-byte load

// Online softmax statistics: running max m and sum s of exp(x - m). m == -inf means "empty"
// (s == 0); the guards keep exp(-inf - -inf) = NaN out.
__device__ __forceinline__ void merge_stats(float& m, float& s, float m2, float s2) {
  if (m2 > m) {
    s = s * expf(m - m2) + s2;  // m == -inf: s == 0 and exp(-inf) == 0
    m = m2;
  } else if (m2 != -INFINITY) {
    s += s2 * expf(m2 - m);
  }
}

// Merges (m, s) over the block; every thread gets the result. blockDim.x: a multiple of 32.
__device__ void block_merge_stats(float& m, float& s, float* shared_m, float* shared_s) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, offset);
    const float s2 = __shfl_xor_sync(0xffffffffu, s, offset);
    merge_stats(m, s, m2, s2);
  }
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  if (lane == 0) {
    shared_m[warp] = m;
    shared_s[warp] = s;
  }
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x >> 5;
    m = lane < warps ? shared_m[lane] : -INFINITY;
    s = lane < warps ? shared_s[lane] : 0.0f;
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float m2 = __shfl_xor_sync(0xffffffffu, m, offset);
      const float s2 = __shfl_xor_sync(0xffffffffu, s, offset);
      merge_stats(m, s, m2, s2);
    }
    if (lane == 0) {
      shared_m[0] = m;
      shared_s[0] = s;
    }
  }
  __syncthreads();
  m = shared_m[0];
  s = shared_s[0];
}

// One block per row. kVec: vocab % 8 == 0 and logits/dlogits 16-byte aligned (uint4 accesses).
// In place (dlogits == logits) is safe: every element is read and then written by one thread, and
// the target logit is read before the block-wide merge, i.e. before any write.
template <bool kVec>
__global__ void __launch_bounds__(kCeThreads)
    cross_entropy_kernel(const __nv_bfloat16* logits, const std::int32_t* targets,
                         const float* weights, std::int64_t vocab, __nv_bfloat16* dlogits,
                         float* nll, double* row_loss, std::int32_t* bad_target,
                         std::int64_t row_offset) {
  __shared__ float shared_m[32];
  __shared__ float shared_s[32];
  const std::int64_t row = blockIdx.x;
  const __nv_bfloat16* x = logits + row * vocab;
  __nv_bfloat16* d = dlogits != nullptr ? dlogits + row * vocab : nullptr;
  const float w = weights[row];
  const std::int32_t target = w != 0.0f ? targets[row] : 0;  // weight-0 rows: target unread
  const bool bad = w != 0.0f && (target < 0 || target >= vocab);
  if (w == 0.0f || bad) {  // uniform over the block: no barrier is skipped by part of it
    if (threadIdx.x == 0) {
      if (nll != nullptr) nll[row] = bad ? NAN : 0.0f;
      if (row_loss != nullptr) row_loss[row] = bad ? static_cast<double>(NAN) : 0.0;
      if (bad && bad_target != nullptr) {
        atomicMax(bad_target, static_cast<std::int32_t>(row_offset + row + 1));
      }
    }
    if (d != nullptr) {
      for (std::int64_t j = threadIdx.x; j < vocab; j += blockDim.x) d[j] = __float2bfloat16_rn(0.0f);
    }
    return;
  }
  const float target_logit = __bfloat162float(x[target]);

  // Pass 1: max and sum of exp(x - max), online.
  float m = -INFINITY, s = 0.0f;
  if constexpr (kVec) {
    const std::int64_t groups = vocab / kVecElems;
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    for (std::int64_t i = threadIdx.x; i < groups; i += blockDim.x) {
      const uint4 packed = xv[i];
      const auto* pairs = reinterpret_cast<const __nv_bfloat162*>(&packed);
      float v[kVecElems];
#pragma unroll
      for (int q = 0; q < kVecElems / 2; ++q) {
        const float2 f = __bfloat1622float2(pairs[q]);
        v[2 * q] = f.x;
        v[2 * q + 1] = f.y;
      }
      float group_max = v[0];
#pragma unroll
      for (int e = 1; e < kVecElems; ++e) group_max = fmaxf(group_max, v[e]);
      if (group_max == -INFINITY) continue;
      if (group_max > m) {
        s *= __expf(m - group_max);
        m = group_max;
      }
#pragma unroll
      for (int e = 0; e < kVecElems; ++e) s += __expf(v[e] - m);
    }
  } else {
    for (std::int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
      const float v = __bfloat162float(x[j]);
      if (v > m) {
        s = s * __expf(m - v) + 1.0f;
        m = v;
      } else if (m != -INFINITY) {
        s += __expf(v - m);
      }
    }
  }
  block_merge_stats(m, s, shared_m, shared_s);
  const float lse = m + logf(s);
  if (threadIdx.x == 0) {
    const float loss = lse - target_logit;
    if (nll != nullptr) nll[row] = loss;
    if (row_loss != nullptr) row_loss[row] = static_cast<double>(w) * static_cast<double>(loss);
  }
  if (d == nullptr) return;

  // Pass 2: dlogits = w * softmax - w * onehot(target).
  if constexpr (kVec) {
    const std::int64_t groups = vocab / kVecElems;
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    uint4* dv = reinterpret_cast<uint4*>(d);
    for (std::int64_t i = threadIdx.x; i < groups; i += blockDim.x) {
      const uint4 packed = xv[i];
      const auto* pairs = reinterpret_cast<const __nv_bfloat162*>(&packed);
      uint4 result;
      auto* out_pairs = reinterpret_cast<__nv_bfloat162*>(&result);
      const std::int64_t base = i * kVecElems;
#pragma unroll
      for (int q = 0; q < kVecElems / 2; ++q) {
        const float2 f = __bfloat1622float2(pairs[q]);
        float g0 = w * __expf(f.x - lse);
        float g1 = w * __expf(f.y - lse);
        if (base + 2 * q == target) g0 -= w;
        if (base + 2 * q + 1 == target) g1 -= w;
        out_pairs[q] = __floats2bfloat162_rn(g0, g1);
      }
      dv[i] = result;
    }
  } else {
    for (std::int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
      float g = w * __expf(__bfloat162float(x[j]) - lse);
      if (j == target) g -= w;
      d[j] = __float2bfloat16_rn(g);
    }
  }
}

__global__ void __launch_bounds__(kSumThreads)
    sum_f64_kernel(const double* values, std::int64_t n, double* out, bool accumulate) {
  __shared__ double partial[kSumThreads];
  double acc = 0.0;
  for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += values[i];
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int stride = kSumThreads / 2; stride > 0; stride >>= 1) {
    if (static_cast<int>(threadIdx.x) < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = (accumulate ? *out : 0.0) + partial[0];
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

void launch_cross_entropy(const std::uint16_t* logits, const std::int32_t* targets,
                          const float* weights, std::int64_t rows, std::int64_t vocab,
                          std::uint16_t* dlogits, float* nll, double* row_loss,
                          std::int32_t* bad_target, std::int64_t row_offset, void* stream) {
  if (rows <= 0) return;
  if (vocab <= 0) throw Error("cross_entropy_forward_backward: vocab must be > 0");
  if (rows > 0x7fffffff || row_offset + rows > 0x7fffffff) {
    throw Error("cross_entropy_forward_backward: " + std::to_string(rows) +
                " rows exceed the grid limit");
  }
  const auto* x = reinterpret_cast<const __nv_bfloat16*>(logits);
  auto* d = reinterpret_cast<__nv_bfloat16*>(dlogits);
  const auto s = static_cast<cudaStream_t>(stream);
  const bool vec = vocab % kVecElems == 0 && aligned16(logits) && (d == nullptr || aligned16(d));
  if (vec) {
    cross_entropy_kernel<true><<<static_cast<unsigned>(rows), kCeThreads, 0, s>>>(
        x, targets, weights, vocab, d, nll, row_loss, bad_target, row_offset);
  } else {
    cross_entropy_kernel<false><<<static_cast<unsigned>(rows), kCeThreads, 0, s>>>(
        x, targets, weights, vocab, d, nll, row_loss, bad_target, row_offset);
  }
  check_last_launch("cross_entropy_kernel");
}

}  // namespace

void cross_entropy_forward_backward(const std::uint16_t* logits, const std::int32_t* targets,
                                    const float* weights, std::int64_t rows, std::int64_t vocab,
                                    std::uint16_t* dlogits, float* nll, double* row_loss,
                                    std::int32_t* bad_target, void* stream) {
  launch_cross_entropy(logits, targets, weights, rows, vocab, dlogits, nll, row_loss, bad_target,
                       0, stream);
}

void sum_f64(const double* values, std::int64_t n, double* out, bool accumulate, void* stream) {
  sum_f64_kernel<<<1, kSumThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      values, n > 0 ? n : 0, out, accumulate);
  check_last_launch("sum_f64_kernel");
}

std::int64_t fused_cross_entropy_chunk_rows(std::int64_t rows, std::int64_t vocab,
                                            const FusedCrossEntropyOptions& options) {
  if (options.chunk_rows < 0) {
    throw Error("lm_head_cross_entropy: chunk_rows must be >= 0 (0 = from the logits budget), got " +
                std::to_string(options.chunk_rows));
  }
  const std::int64_t all = std::max<std::int64_t>(rows, 1);
  if (options.chunk_rows > 0) return std::min(options.chunk_rows, all);
  const std::int64_t per_row = std::max<std::int64_t>(vocab, 1) * 2;  // bf16 logits
  std::int64_t chunk = static_cast<std::int64_t>(options.logits_budget_bytes) / per_row;
  if (chunk >= 64) chunk = chunk / 64 * 64;
  return std::min(std::max<std::int64_t>(chunk, 1), all);
}

void lm_head_cross_entropy_async(Blas& blas, DeviceAllocator& allocator, const std::uint16_t* h,
                                 const std::uint16_t* w, const std::int32_t* targets,
                                 const float* weights, std::int64_t rows, std::int64_t hidden,
                                 std::int64_t vocab, std::uint16_t* dh, float* dw,
                                 double* loss_out, std::int32_t* bad_target_out,
                                 const FusedCrossEntropyOptions& options, void* stream) {
  if (rows < 0 || hidden <= 0 || vocab <= 0) {
    throw Error("lm_head_cross_entropy: need rows >= 0, hidden > 0 and vocab > 0, got rows=" +
                std::to_string(rows) + " hidden=" + std::to_string(hidden) +
                " vocab=" + std::to_string(vocab));
  }
  if (loss_out == nullptr) throw Error("lm_head_cross_entropy: loss_out is null");
  if (bad_target_out != nullptr) memset_async(bad_target_out, 0, sizeof(std::int32_t), stream);
  const std::int64_t chunk = fused_cross_entropy_chunk_rows(rows, vocab, options);
  const bool backward = dh != nullptr || dw != nullptr;
  DeviceBuffer logits(allocator, static_cast<std::size_t>(chunk * vocab) * 2, stream);
  DeviceBuffer row_loss(allocator, static_cast<std::size_t>(std::max<std::int64_t>(rows, 1)) * 8,
                        stream);
  auto* chunk_logits = logits.as<std::uint16_t>();
  for (std::int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const std::int64_t c = std::min(chunk, rows - r0);
    const std::uint16_t* h_chunk = h + r0 * hidden;
    // logits[c, vocab] = h_chunk[c, hidden] * W[vocab, hidden]^T (the linear_forward GEMM).
    gemm(blas, false, true, c, vocab, hidden, 1.0f, h_chunk, hidden, w, hidden, 0.0f, chunk_logits,
         vocab, GemmOut::bf16, stream);
    // Loss per row; dlogits in place over the logits.
    launch_cross_entropy(chunk_logits, targets + r0, weights + r0, c, vocab,
                         backward ? chunk_logits : nullptr, nullptr, row_loss.as<double>() + r0,
                         bad_target_out, r0, stream);
    if (dh != nullptr) {
      // dh[c, hidden] = dlogits[c, vocab] * W[vocab, hidden].
      gemm(blas, false, false, c, hidden, vocab, 1.0f, chunk_logits, vocab, w, hidden, 0.0f,
           dh + r0 * hidden, hidden, GemmOut::bf16, stream);
    }
    if (dw != nullptr) {
      // dW[vocab, hidden] += dlogits^T[vocab, c] * h_chunk[c, hidden] (fp32 accumulator).
      gemm(blas, true, false, vocab, hidden, c, 1.0f, chunk_logits, vocab, h_chunk, hidden, 1.0f,
           dw, hidden, GemmOut::f32, stream);
    }
  }
  sum_f64(row_loss.as<double>(), rows, loss_out, false, stream);
}

double lm_head_cross_entropy(Blas& blas, DeviceAllocator& allocator, const std::uint16_t* h,
                             const std::uint16_t* w, const std::int32_t* targets,
                             const float* weights, std::int64_t rows, std::int64_t hidden,
                             std::int64_t vocab, std::uint16_t* dh, float* dw,
                             const FusedCrossEntropyOptions& options, void* stream) {
  // One device block for both results, read back with one copy: the loss (double) at byte 0, the
  // bad-target flag (int32) at byte 8.
  struct Result {
    double loss;
    std::int32_t bad_target;
    std::int32_t pad;
  };
  static_assert(sizeof(Result) == 16);
  DeviceBuffer result(allocator, sizeof(Result), stream);
  auto* bytes = result.as<unsigned char>();
  lm_head_cross_entropy_async(blas, allocator, h, w, targets, weights, rows, hidden, vocab, dh, dw,
                              reinterpret_cast<double*>(bytes),
                              reinterpret_cast<std::int32_t*>(bytes + 8), options, stream);
  Result host{};
  copy_to_host_async(&host, bytes, sizeof(Result), stream);
  check_cuda(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "cudaStreamSynchronize");
  if (host.bad_target != 0) {
    const std::int64_t row = host.bad_target - 1;
    std::int32_t target = 0;
    copy_to_host(&target, targets + row, sizeof(target));
    throw Error("lm_head_cross_entropy: row " + std::to_string(row) + " has target " +
                std::to_string(target) + " outside the vocabulary [0, " + std::to_string(vocab) +
                ")");
  }
  return host.loss;
}

}  // namespace odc::kernels::cuda
