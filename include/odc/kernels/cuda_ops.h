#pragma once
// CUDA versions of the elementwise / normalization / embedding / optimizer kernels (built when the
// CUDA backend is enabled). Same semantics and argument order as the CPU kernels in rmsnorm.h,
// rope.h, swiglu.h, embedding.h and adamw.h, plus a trailing `void* stream` (a cudaStream_t;
// nullptr = legacy default stream). All pointers are device pointers.
//
// Storage: activations and weights are bf16 (std::uint16_t bit patterns here, __nv_bfloat16 in the
// .cu files); every computation accumulates in fp32. Per-row statistics (rmsnorm rstd), rope
// tables and parameter-gradient accumulators (rmsnorm dweight, embedding dtable) are fp32, since
// they are reduced over many rows and feed the fp32 master/gradient shards.
//
// Launches are asynchronous; a launch failure throws odc::Error (check_last_launch).
//
// Determinism: no kernel here uses floating-point atomics. Every gradient sum has a fixed order
// that depends only on the sizes (and, for the embedding, on the token ids), so a GPU run is
// bitwise reproducible whatever the launch timing or the stream.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "odc/kernels/adamw.h"
#include "odc/kernels/cuda_device.h"

namespace odc::kernels::cuda {

// ---- RMSNorm (rmsnorm.h) ----

// y = x * rstd * weight per row of `dim`; rstd[rows] = 1/sqrt(mean(x^2)+eps) (fp32).
void rmsnorm_forward(const std::uint16_t* x, const std::uint16_t* weight, std::uint16_t* y,
                     float* rstd, std::int64_t rows, std::int64_t dim, double eps, void* stream);

// dx[rows,dim] is overwritten when dx_accumulate is false, else added to. dweight[dim] (fp32) is
// always accumulated. dx may alias dy.
// dweight is reduced without atomics: partial sums of dy * (x * rstd) over fixed 64-row chunks
// (rows ascending) into an fp32 scratch [ceil(rows/64), dim], then the chunks summed in ascending
// order and added to dweight once; rows <= 65535 * 64. The scratch,
// rmsnorm_backward_workspace_bytes(rows, dim) bytes, is allocated from `allocator` on `stream`, or
// given as `workspace` (device memory that `stream` may use; free again once the call's work on
// `stream` has run).
std::size_t rmsnorm_backward_workspace_bytes(std::int64_t rows, std::int64_t dim);
void rmsnorm_backward(const std::uint16_t* dy, const std::uint16_t* x, const std::uint16_t* weight,
                      const float* rstd, std::uint16_t* dx, float* dweight, std::int64_t rows,
                      std::int64_t dim, bool dx_accumulate, DeviceAllocator& allocator,
                      void* stream);
void rmsnorm_backward(const std::uint16_t* dy, const std::uint16_t* x, const std::uint16_t* weight,
                      const float* rstd, std::uint16_t* dx, float* dweight, std::int64_t rows,
                      std::int64_t dim, bool dx_accumulate, float* workspace, void* stream);

// ---- RoPE (rope.h; "rotate half" layout) ----
// cos/sin tables [tokens, head_dim/2] in fp32, e.g. cpu::rope_tables<float> uploaded to the device.

// In place on x[tokens, heads*head_dim].
void rope_forward(std::uint16_t* x, const float* cos_table, const float* sin_table,
                  std::int64_t tokens, int heads, int head_dim, void* stream);
// In place on dx[tokens, heads*head_dim]: rotation by -angle.
void rope_backward(std::uint16_t* dx, const float* cos_table, const float* sin_table,
                   std::int64_t tokens, int heads, int head_dim, void* stream);

// ---- SwiGLU (swiglu.h): h = silu(gate) * up, over `rows` rows of `width` ----
// Row r's gate and up start at gate + r * ld and up + r * ld (ld >= width: the fused gate/up
// projection has both in one [rows, 2 * width] matrix, ld = 2 * width, up = gate + width; flat
// arrays are one row); h and dh are [rows, width]; dgate and dup (overwritten) have gate's and
// up's layout and must not alias the inputs.
void swiglu_forward(const std::uint16_t* gate, const std::uint16_t* up, std::int64_t ld, std::uint16_t* h,
                    std::int64_t rows, std::int64_t width, void* stream);
void swiglu_backward(const std::uint16_t* dh, const std::uint16_t* gate, const std::uint16_t* up, std::int64_t ld,
                     std::uint16_t* dgate, std::uint16_t* dup, std::int64_t rows, std::int64_t width, void* stream);

// ---- Embedding (embedding.h) ----

// out[t, :] = table[ids[t], :]   (ids on the device, validated < vocab by the data layer)
void embedding_forward(const std::int32_t* ids, const std::uint16_t* table, std::uint16_t* out,
                       std::int64_t tokens, std::int64_t dim, void* stream);
// dtable[ids[t], :] += dout[t, :] (fp32 accumulator), without atomics and without scratch: each
// element dtable[id, d] is updated by exactly one thread, which adds the dout[t, d] of the tokens
// with ids[t] == id in token order, i.e. the CPU kernel's order (the results are bitwise equal to
// cpu::embedding_backward<float> on the same bf16 values). Thread (column d, partition p) scans
// all token ids and handles those with id % P == p (P = 8..64, a function of dim only); the scan
// costs tokens * (dim / 32) * P warp-wide shared-memory reads (estimated ~0.1 ms for 8K tokens x
// 2048 columns, not yet measured), once per microbatch. A device sort by id would save the scan
// but needs key/value scratch and a segment table; a frequent id costs both schemes a serial run.
void embedding_backward(const std::int32_t* ids, const std::uint16_t* dout, float* dtable,
                        std::int64_t tokens, std::int64_t dim, void* stream);

// ---- AdamW (adamw.h), multi-tensor ----

// The hyper-parameters of the CPU kernel (adamw.h).
using AdamWConfig = kernels::AdamWParams;

// One contiguous fp32 range of the master weights with its gradient and moments. weight_decay =
// false applies no decay to this range (norm weights, biases); true applies config.weight_decay.
struct AdamWSegment {
  float* param = nullptr;
  const float* grad = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  std::int64_t count = 0;
  bool weight_decay = true;
};

// Updates every segment with one kernel launch per (up to) 64 segments; the per-step scalars are
// formed on the host in double exactly as cpu::adamw_step does. Throws odc::Error if step < 1.
void adamw_step_multi(const std::vector<AdamWSegment>& segments, const AdamWConfig& config,
                      void* stream);

}  // namespace odc::kernels::cuda
