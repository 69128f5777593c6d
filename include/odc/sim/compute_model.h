#pragma once
// Per-unit compute times for the simulator. A microbatch runs the same sequence of steps on every
// device: forward of units 0..L (embedding, decoder layers), the head unit L+1 (final norm +
// LM head + loss, forward and backward fused), then backward of units L..0. Each step's time is a
// function of the microbatch's token count T and causal attention pairs P (sum over its sequences
// of s(s+1)/2), so packing several short sequences is cheaper than one long one of equal tokens.
//
// Two sources fill the model: a named accelerator (FLOPs over peak throughput, with efficiencies
// and a weight-streaming floor; compute_model.cpp) or a trainer trace (least-squares fits per
// unit and phase; calibration.h).
#include <cstdint>
#include <string>
#include <vector>

#include "odc/core/device_specs.h"
#include "odc/model/llama_config.h"

namespace odc::sim {

enum class Phase : std::uint8_t { forward, head, backward };
const char* phase_name(Phase phase);

// t(T, P) = max(c0 + c1*T + c2*P, floor) for T > 0; an empty microbatch (T = 0) takes no time.
struct StepTime {
  double c0 = 0.0;     // seconds per step (launch and fixed overheads)
  double c1 = 0.0;     // seconds per token
  double c2 = 0.0;     // seconds per causal attention pair
  double floor = 0.0;  // seconds: reading the unit's weights once from memory bounds small steps
  double at(std::int64_t tokens, double pairs) const;
  StepTime scaled(double factor) const { return {c0 * factor, c1 * factor, c2 * factor, floor * factor}; }
};

// One step of a microbatch: which unit, which phase.
struct Step {
  int unit = 0;
  Phase phase = Phase::forward;
};

struct ComputeModel {
  std::vector<StepTime> forward;   // units 0..L (embedding, decoder layers)
  std::vector<StepTime> backward;  // units 0..L
  StepTime head;                   // unit L+1: forward + loss + backward
  double optimizer_s = 0.0;        // the optimizer step of one device's shard
  std::string description;         // where the numbers come from (for reports)

  int num_units() const { return static_cast<int>(forward.size()) + 1; }
  // The steps of one microbatch in execution order: F0..FL, H(L+1), BL..B0.
  std::vector<Step> steps() const;
  double time(const Step& step, std::int64_t tokens, double pairs) const;
  // Compute time of a whole microbatch (all steps).
  double microbatch_time(std::int64_t tokens, double pairs) const;
  // Same model with every unit taking `time` per token (and nothing else): for tests and sketches.
  static ComputeModel uniform(int decoder_layers, double seconds_per_token, double optimizer_s = 0.0);
};

// The first field in which two models differ in a way that changes per-unit compute (hidden,
// intermediate, layers, heads, KV heads, head_dim, vocabulary, tied embeddings); field is null
// when they have the same shape. Per-unit times (traced or fitted) only describe the shape they
// were taken on.
struct ShapeDifference {
  const char* field = nullptr;
  std::int64_t a = 0;
  std::int64_t b = 0;
  bool none() const { return field == nullptr; }
};
ShapeDifference shape_difference(const model::LlamaConfig& a, const model::LlamaConfig& b);

// Named-accelerator assumptions (the sim.* keys of the same names).
struct DeviceComputeOptions {
  double matmul_efficiency = 0.6;     // fraction of peak bf16 FLOP/s reached by the linear layers
  double attention_efficiency = 0.45;  // fraction reached by causal attention
  double param_bytes = 2.0;           // bytes per parameter read by compute (bf16 on GPUs)
  bool gradient_checkpointing = true;  // backward recomputes the forward of each layer
  double optimizer_bytes_per_element = 32.0;  // memory traffic of AdamW per owned element
  int devices = 1;                    // the optimizer updates numel / devices elements
};

// Per unit forward = max(FLOPs / (peak * efficiency), weight bytes / memory bandwidth), with
// FLOPs = 2 * matmul parameters * T (+ 4 * q_dim * P per decoder layer at attention efficiency);
// backward = 2x forward (3x with gradient checkpointing); head = 3x its forward (matmul only).
ComputeModel compute_model_for_device(const model::LlamaConfig& config, const DeviceSpec& device,
                                      const DeviceComputeOptions& options);

}  // namespace odc::sim
