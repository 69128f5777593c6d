#pragma once
// Rotary position embedding in the Hugging Face "rotate half" layout: within each head of size D,
// element i (< D/2) pairs with element i + D/2:
//   y[i]       = x[i] * cos(p*f_i) - x[i+D/2] * sin(p*f_i)
//   y[i + D/2] = x[i+D/2] * cos(p*f_i) + x[i] * sin(p*f_i)
// where p is the token's position (restarting at 0 for every packed sequence) and f_i = inv_freq[i].
#include <cstdint>
#include <string>
#include <vector>

namespace odc::kernels::cpu {

// Hugging Face `rope_scaling` (type "llama3"; "default"/absent means no scaling).
struct RopeScaling {
  std::string type = "default";
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_max_position_embeddings = 8192.0;
};

// inv_freq[i] = theta^(-2i/D) for i < D/2, adjusted by llama3 scaling exactly as Hugging Face
// `_compute_llama3_parameters` does (wavelength bands with smooth interpolation).
std::vector<double> rope_inv_freq(int head_dim, double theta, const RopeScaling& scaling);

// cos/sin tables [tokens, D/2] for the given positions, computed in double and stored as T.
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
