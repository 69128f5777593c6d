#pragma once
// Rotary position embedding in the Hugging Face "rotate half" layout: within each head of size D,
// element i (< D/2) pairs with element i + D/2:
//   y[i]       = x[i] * cos(p*f_i) - x[i+D/2] * sin(p*f_i)
//   y[i + D/2] = x[i+D/2] * cos(p*f_i) + x[i] * sin(p*f_i)
// where p is the token's position (restarting at 0 for every packed sequence) and f_i = inv_freq[i].
#include <cstdint>
#include <vector>

#include "odc/kernels/rope_scaling.h"

namespace odc::kernels::cpu {

// cos/sin tables [tokens, D/2] for the given positions (inv_freq: rope_inv_freq), computed in double and stored as T.
template <typename T>
void rope_tables(const std::int32_t* positions, std::int64_t tokens, const std::vector<double>& inv_freq,
                 T* cos_table, T* sin_table);

// In place on x[tokens, heads*head_dim].
template <typename T>
void rope_forward(T* x, const T* cos_table, const T* sin_table, std::int64_t tokens, int heads,
                  int head_dim);

// In place on dx[tokens, heads*head_dim]: applies the transpose (rotation by -angle).
template <typename T>
void rope_backward(T* dx, const T* cos_table, const T* sin_table, std::int64_t tokens, int heads,
                   int head_dim);

}  // namespace odc::kernels::cpu
