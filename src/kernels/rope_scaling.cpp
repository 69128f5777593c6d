#include "odc/kernels/rope_scaling.h"

#include <cmath>
#include <numbers>

#include "odc/core/error.h"

namespace odc::kernels {

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

}  // namespace odc::kernels
