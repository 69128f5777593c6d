#pragma once
// Causal GQA attention over packed sequences with the CUDA kernels' bf16 rounding points
// (src/kernels/cuda/attention_forward.cuh, attention_backward.cuh), on the host, for the bf16 mode
// of CpuBackend. Layouts, scale and semantics are those of kernels/attention.h; q, k, v, out and
// dout hold bf16-representable fp32 values; lse is fp32. Key segments (cu_seqlens_k) as there:
// query row i of a segment sees keys [0, i + k_len - q_len] of its key segment.
//
// Forward, per query row, keys visited in tiles of 64 from the sequence start (the GPU's key
// tiles): s = q.k in fp32; the running max m is updated per tile, the probabilities
// p = exp2(s * scale_log2 - m * scale_log2) and their sum l stay fp32, but the PV product uses p
// rounded to bf16; out = bf16(o / l), lse = m * scale + log(l).
// Backward: D = rowsum(dout * out) in fp32; p = exp2(s * scale_log2 - lse * log2(e)) and
// dS = p * (dout.v - D) in fp32; dV += bf16(p) dout, dK += bf16(dS) q, dQ += bf16(dS) k in fp32
// (dK/dV summed over the query heads of a kv group); dq = bf16(scale dQ), dk = bf16(scale dK),
// dv = bf16(dV). Only the summation order differs from the GPU's tensor-core tiles.
#include "odc/kernels/attention.h"

namespace odc::backend::bf16 {

void attention_forward(const kernels::cpu::AttentionShape& shape, const float* q, const float* k,
                       const float* v, float* out, float* lse);

// dq, dk, dv are overwritten.
void attention_backward(const kernels::cpu::AttentionShape& shape, const float* q, const float* k,
                        const float* v, const float* out, const float* lse, const float* dout,
                        float* dq, float* dk, float* dv);

}  // namespace odc::backend::bf16
