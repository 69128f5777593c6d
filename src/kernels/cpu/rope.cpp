#include "odc/kernels/rope.h"

#include <cmath>
#include <numbers>

#include "odc/core/error.h"

namespace odc::kernels::cpu {

std::vector<double> rope_inv_freq(int head_dim, double theta, const RopeScaling& scaling) {
  if (head_dim <= 0 || head_dim % 2 != 0) {
    fail("rotary embedding needs an even head_dim > 0, got {}", head_dim);
  }
  if (!(theta > 0.0)) fail("rope_theta must be > 0, got {}", theta);
  const int half = head_dim / 2;
  std::vector<double> inv_freq(static_cast<std::size_t>(half));
  for (int i = 0; i < half; ++i) {
    inv_freq[i] = 1.0 / std::pow(theta, double(2 * i) / double(head_dim));
  }
  if (scaling.type == "default" || scaling.type.empty()) return inv_freq;
  if (scaling.type == "linear") {
    // HF linear scaling divides positions by `factor`, i.e. every frequency.
    if (!(scaling.factor > 0.0)) fail("rope_scaling.factor must be > 0, got {}", scaling.factor);
    for (double& f : inv_freq) f /= scaling.factor;
    return inv_freq;
  }
  if (scaling.type != "llama3") {
    fail("rope_scaling type '{}' is not supported: expected default, linear or llama3",
         scaling.type);
  }
  // Hugging Face _compute_llama3_parameters: long wavelengths are slowed down by `factor`, short
  // ones are kept, and the band between is interpolated smoothly.
  const double factor = scaling.factor;
  const double low = scaling.low_freq_factor;
  const double high = scaling.high_freq_factor;
  const double original = scaling.original_max_position_embeddings;
  if (!(factor > 0.0) || !(high > low) || !(low > 0.0) || !(original > 0.0)) {
    fail(
        "rope_scaling llama3 needs factor > 0, high_freq_factor > low_freq_factor > 0 and "
        "original_max_position_embeddings > 0; got factor {}, low {}, high {}, original {}",
        factor, low, high, original);
  }
  const double low_freq_wavelen = original / low;
  const double high_freq_wavelen = original / high;
  for (double& f : inv_freq) {
    const double wavelen = 2.0 * std::numbers::pi / f;
    if (wavelen < high_freq_wavelen) continue;
    if (wavelen > low_freq_wavelen) {
      f /= factor;
    } else {
      const double smooth = (original / wavelen - low) / (high - low);
      f = (1.0 - smooth) * f / factor + smooth * f;
    }
  }
  return inv_freq;
}

template <typename T>
void rope_tables(const std::int32_t* positions, std::int64_t tokens,
                 const std::vector<double>& inv_freq, T* cos_table, T* sin_table) {
  const std::int64_t half = static_cast<std::int64_t>(inv_freq.size());
  for (std::int64_t t = 0; t < tokens; ++t) {
    const double p = double(positions[t]);
    for (std::int64_t i = 0; i < half; ++i) {
      const double angle = p * inv_freq[i];
      cos_table[t * half + i] = T(std::cos(angle));
      sin_table[t * half + i] = T(std::sin(angle));
    }
  }
}

namespace {

// Rotates every head of every token by +angle (sign = 1) or -angle (sign = -1, the transpose).
template <typename T>
void rotate(T* x, const T* cos_table, const T* sin_table, std::int64_t tokens, int heads,
            int head_dim, T sign) {
  const std::int64_t half = head_dim / 2;
  for (std::int64_t t = 0; t < tokens; ++t) {
    const T* c = cos_table + t * half;
    const T* s = sin_table + t * half;
    for (int h = 0; h < heads; ++h) {
      T* lo = x + (t * heads + h) * head_dim;
      T* hi = lo + half;
      for (std::int64_t i = 0; i < half; ++i) {
        const T a = lo[i];
        const T b = hi[i];
        const T si = sign * s[i];
        lo[i] = a * c[i] - b * si;
        hi[i] = b * c[i] + a * si;
      }
    }
  }
}

}  // namespace

template <typename T>
void rope_forward(T* x, const T* cos_table, const T* sin_table, std::int64_t tokens, int heads,
                  int head_dim) {
  rotate(x, cos_table, sin_table, tokens, heads, head_dim, T(1));
}

template <typename T>
void rope_backward(T* dx, const T* cos_table, const T* sin_table, std::int64_t tokens, int heads,
                   int head_dim) {
  rotate(dx, cos_table, sin_table, tokens, heads, head_dim, T(-1));
}

#define ODC_INSTANTIATE(T)                                                                        \
  template void rope_tables<T>(const std::int32_t*, std::int64_t, const std::vector<double>&, T*, \
                               T*);                                                               \
  template void rope_forward<T>(T*, const T*, const T*, std::int64_t, int, int);                  \
  template void rope_backward<T>(T*, const T*, const T*, std::int64_t, int, int);
ODC_INSTANTIATE(float)
ODC_INSTANTIATE(double)
#undef ODC_INSTANTIATE

}  // namespace odc::kernels::cpu
