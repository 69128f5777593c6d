#pragma once
// CUDA kernels the CUDA backend needs beyond the op families (built when CUDA is): row gathers
// and scatters of the LM head, RoPE tables from device positions, and deterministic reductions
// (the global gradient norm, loss sums). Device pointers; `stream` is a cudaStream_t. All launches
// are asynchronous.
//
// Determinism: every reduction runs over a fixed grid in a fixed order with no atomics, so its
// result depends only on the input values and their count (bit for bit, run to run).
#include <cstdint>

namespace odc::kernels::cuda {

// target[i, :] = source[rows[i], :] for i < n_rows; rows of `row_bytes` bytes (a multiple of 2).
void gather_rows(const void* source, const std::int32_t* rows, std::int64_t n_rows, std::int64_t row_bytes,
                 void* target, void* stream);
// target[rows[i], :] = source[i, :] (rows distinct).
void scatter_rows(const void* source, const std::int32_t* rows, std::int64_t n_rows, std::int64_t row_bytes,
                  void* target, void* stream);

// x[i] = bf16(float(x[i]) * alpha) for n bf16 elements, in place (the policy head's logits / T).
void scale_bf16(void* x, std::int64_t n, float alpha, void* stream);
// acc += in over n bf16 elements (each sum in fp32, rounded to nearest even once).
void add_bf16(void* acc, const void* in, std::int64_t n, void* stream);

// cos/sin [tokens, half] (fp32) of angle positions[t] * inv_freq[i], computed in double like
// cpu::rope_tables. inv_freq: `half` doubles on the device.
void rope_tables(const std::int32_t* positions, std::int64_t tokens, const double* inv_freq, std::int64_t half,
                 float* cos_table, float* sin_table, void* stream);

// Scratch doubles sum_of_squares needs (a fixed count: the partial sums of its fixed grid).
std::int64_t sum_of_squares_scratch();
// *out = sum of x[i]^2 over n fp32 elements, in double (fixed order).
void sum_of_squares(const float* x, std::int64_t n, double* scratch, double* out, void* stream);

// *out (+)= sum of n fp32 values, in double, one block in a fixed order.
void sum_f32(const float* values, std::int64_t n, double* out, bool accumulate, void* stream);

}  // namespace odc::kernels::cuda
