#pragma once
// CUDA weighted softmax cross-entropy (cross_entropy.h) and the fused, chunked LM head + cross-
// entropy of the training step (built when the CUDA backend is enabled). Device pointers
// throughout; `stream` is a cudaStream_t (nullptr = legacy default stream).
//
// Row r contributes weight[r] * (logsumexp(logits[r,:]) - logits[r, target[r]]); rows with weight 0
// contribute nothing and their target is not read (so it may be an ignore index such as -100).
// Logits and gradients are bf16; the softmax statistics are fp32 per row and the loss sum is
// reduced in double, in a fixed order (deterministic for a given row count).
#include <cstddef>
#include <cstdint>

#include "odc/kernels/cuda_device.h"
#include "odc/kernels/cuda_gemm.h"

namespace odc::kernels::cuda {

// The unfused kernel (asynchronous), mirroring cpu::cross_entropy_forward_backward:
//   nll[r]      unweighted row loss (fp32; 0 for weight-0 rows)        when nll != nullptr
//   row_loss[r] weight[r] * nll_r (double; 0 for weight-0 rows)         when row_loss != nullptr
//   dlogits     weight[r] * (softmax(logits[r]) - onehot(target[r]))    when dlogits != nullptr;
//               bf16, may alias logits (in place); zero for weight-0 rows
//   bad_target  when != nullptr (an int32 the caller zeroed): a weighted row whose target is
//               outside [0, vocab) sets it to 1 + that row's index (some such row); that row's
//               nll/row_loss are NaN and its dlogits zero.
void cross_entropy_forward_backward(const std::uint16_t* logits, const std::int32_t* targets,
                                    const float* weights, std::int64_t rows, std::int64_t vocab,
                                    std::uint16_t* dlogits, float* nll, double* row_loss,
                                    std::int32_t* bad_target, void* stream);

// *out = sum of values[0..n) (or *out += sum when accumulate), one block in a fixed order: the
// result is bit-for-bit reproducible. Asynchronous.
void sum_f64(const double* values, std::int64_t n, double* out, bool accumulate, void* stream);

struct FusedCrossEntropyOptions {
  // Rows of logits materialized at a time; 0 chooses the largest multiple of 64 rows (at least 1
  // row, at most all rows) whose bf16 logits fit logits_budget_bytes.
  std::int64_t chunk_rows = 0;
  std::size_t logits_budget_bytes = std::size_t(512) << 20;
};

// The chunk size the fused path uses for (rows, vocab, options).
std::int64_t fused_cross_entropy_chunk_rows(std::int64_t rows, std::int64_t vocab,
                                            const FusedCrossEntropyOptions& options);

// Fused LM head + cross-entropy, forward and backward, never materializing all [rows, vocab]
// logits. For each chunk of rows [r0, r0 + c):
//   logits[c, vocab] = h[r0:r0+c] * W^T              (bf16, cuBLASLt, fp32 accumulation)
//   loss, dlogits    = cross_entropy_forward_backward(logits) in place
//   dh[r0:r0+c]      = dlogits * W                   (bf16, overwritten)
//   dW              += dlogits^T * h[r0:r0+c]        (fp32 accumulator)
// h[rows, hidden] and W[vocab, hidden] (the lm-head / tied embedding, [out, in] as in matmul.h)
// are bf16; targets[rows] int32; weights[rows] fp32 (0 = masked, e.g. 1/tokens for a mean).
// dh or dw may be nullptr (that gradient is not wanted). dh must not alias h.
// The chunk buffer and per-row losses come from `allocator` on `stream`.
//
// Asynchronous: *loss_out (device double) receives the weighted loss sum; *bad_target_out (device
// int32, may be nullptr) 0, or 1 + the index of some weighted row whose target is out of range.
void lm_head_cross_entropy_async(Blas& blas, DeviceAllocator& allocator, const std::uint16_t* h,
                                 const std::uint16_t* w, const std::int32_t* targets,
                                 const float* weights, std::int64_t rows, std::int64_t hidden,
                                 std::int64_t vocab, std::uint16_t* dh, float* dw,
                                 double* loss_out, std::int32_t* bad_target_out,
                                 const FusedCrossEntropyOptions& options, void* stream);

// Synchronous: as above, then waits for the stream and returns the weighted loss sum. Throws
// odc::Error naming the row when a weighted row's target is outside [0, vocab).
double lm_head_cross_entropy(Blas& blas, DeviceAllocator& allocator, const std::uint16_t* h,
                             const std::uint16_t* w, const std::int32_t* targets,
                             const float* weights, std::int64_t rows, std::int64_t hidden,
                             std::int64_t vocab, std::uint16_t* dh, float* dw,
                             const FusedCrossEntropyOptions& options, void* stream);

}  // namespace odc::kernels::cuda
