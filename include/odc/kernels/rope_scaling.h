#pragma once
// RoPE frequencies: the per-pair rotation rates of rotary position embeddings (rope.h), with
// Hugging Face's `rope_scaling`. Host-side model math shared by every backend.
#include <string>
#include <vector>

namespace odc::kernels {

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

}  // namespace odc::kernels
