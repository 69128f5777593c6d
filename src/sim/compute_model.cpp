#include "odc/sim/compute_model.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include <fmt/format.h>

#include "odc/core/error.h"
#include "odc/model/units.h"

namespace odc::sim {

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::forward: return "forward";
    case Phase::head: return "head";
    case Phase::backward: return "backward";
  }
  return "?";
}

double StepTime::at(std::int64_t tokens, double pairs) const {
  if (tokens <= 0) return 0.0;  // an empty (padding) microbatch computes nothing
  return std::max(c0 + c1 * static_cast<double>(tokens) + c2 * pairs, floor);
}

std::vector<Step> ComputeModel::steps() const {
  const int layers_and_embedding = static_cast<int>(forward.size());
  std::vector<Step> out;
  out.reserve(static_cast<std::size_t>(2 * layers_and_embedding + 1));
  for (int u = 0; u < layers_and_embedding; ++u) out.push_back({u, Phase::forward});
  out.push_back({layers_and_embedding, Phase::head});
  for (int u = layers_and_embedding - 1; u >= 0; --u) out.push_back({u, Phase::backward});
  return out;
}

double ComputeModel::time(const Step& step, std::int64_t tokens, double pairs) const {
  switch (step.phase) {
    case Phase::forward: return forward.at(static_cast<std::size_t>(step.unit)).at(tokens, pairs);
    case Phase::backward: return backward.at(static_cast<std::size_t>(step.unit)).at(tokens, pairs);
    case Phase::head: return head.at(tokens, pairs);
  }
  return 0.0;
}

double ComputeModel::microbatch_time(std::int64_t tokens, double pairs) const {
  double total = head.at(tokens, pairs);
  for (std::size_t u = 0; u < forward.size(); ++u) total += forward[u].at(tokens, pairs) + backward[u].at(tokens, pairs);
  return total;
}

ShapeDifference shape_difference(const model::LlamaConfig& a, const model::LlamaConfig& b) {
  const std::pair<const char*, std::pair<std::int64_t, std::int64_t>> fields[] = {
      {"hidden_size", {a.hidden_size, b.hidden_size}},
      {"intermediate_size", {a.intermediate_size, b.intermediate_size}},
      {"num_hidden_layers", {a.num_hidden_layers, b.num_hidden_layers}},
      {"num_attention_heads", {a.num_attention_heads, b.num_attention_heads}},
      {"num_key_value_heads", {a.num_key_value_heads, b.num_key_value_heads}},
      {"head_dim", {a.head_dim, b.head_dim}},
      {"vocab_size", {a.vocab_size, b.vocab_size}},
      {"tie_word_embeddings", {a.tie_word_embeddings, b.tie_word_embeddings}},
  };
  for (const auto& [field, values] : fields) {
    if (values.first != values.second) return {field, values.first, values.second};
  }
  return {};
}

ComputeModel ComputeModel::uniform(int decoder_layers, double seconds_per_token, double optimizer_s) {
  if (decoder_layers < 0) fail("ComputeModel::uniform: decoder_layers must be >= 0, got {}", decoder_layers);
  ComputeModel model;
  const StepTime per_token{0.0, seconds_per_token, 0.0, 0.0};
  model.forward.assign(static_cast<std::size_t>(decoder_layers) + 1, per_token);
  model.backward.assign(static_cast<std::size_t>(decoder_layers) + 1, per_token);
  model.head = per_token;
  model.optimizer_s = optimizer_s;
  model.description = fmt::format("uniform {} s/token per step", seconds_per_token);
  return model;
}

ComputeModel compute_model_for_device(const model::LlamaConfig& config, const DeviceSpec& device,
                                      const DeviceComputeOptions& options) {
  auto check_fraction = [](double value, const char* key) {
    if (!(value > 0.0 && value <= 1.0)) fail("sim.{} must be in (0, 1], found {}", key, value);
  };
  check_fraction(options.matmul_efficiency, "matmul_efficiency");
  check_fraction(options.attention_efficiency, "attention_efficiency");
  if (!(options.param_bytes > 0.0)) fail("sim.param_bytes must be positive, found {}", options.param_bytes);
  if (!(options.optimizer_bytes_per_element >= 0.0)) {
    fail("sim.optimizer_bytes_per_element must be >= 0, found {}", options.optimizer_bytes_per_element);
  }
  if (options.devices < 1) fail("sim.devices must be at least 1, found {}", options.devices);
  if (!(device.peak_bf16_flops > 0.0 && device.memory_bandwidth > 0.0)) {
    fail("device '{}' has no bf16 peak or memory bandwidth to model compute with", device.name);
  }

  const double matmul_rate = device.peak_bf16_flops * options.matmul_efficiency;
  const double attention_rate = device.peak_bf16_flops * options.attention_efficiency;
  const double bandwidth = device.memory_bandwidth;
  const auto c = static_cast<double>(config.hidden_size);
  const auto q = static_cast<double>(config.q_dim());
  const auto kv = static_cast<double>(config.kv_dim());
  const auto f = static_cast<double>(config.intermediate_size);
  const auto vocab = static_cast<double>(config.vocab_size);
  const auto layouts = model::build_unit_layouts(config);
  const double backward_factor = options.gradient_checkpointing ? 3.0 : 2.0;

  ComputeModel model;
  // Embedding: a row lookup, no FLOPs; forward reads a row and writes an activation per token,
  // backward scatter-adds fp32 rows and has to write the whole (vocab x hidden) fp32 gradient.
  model.forward.push_back({0.0, 2.0 * c * options.param_bytes / bandwidth, 0.0, 0.0});
  model.backward.push_back({0.0, 2.0 * c * 4.0 / bandwidth, 0.0, vocab * c * 4.0 / bandwidth});
  // Decoder layers: q, k, v, o, gate, up, down matmuls (biases and norms are noise next to them).
  const double matmul_params = 2.0 * c * q + 2.0 * c * kv + 3.0 * c * f;
  for (int l = 1; l <= config.num_hidden_layers; ++l) {
    const double weight_bytes = static_cast<double>(layouts[static_cast<std::size_t>(l)].numel) * options.param_bytes;
    const StepTime forward{0.0, 2.0 * matmul_params / matmul_rate, 4.0 * q / attention_rate, weight_bytes / bandwidth};
    model.forward.push_back(forward);
    model.backward.push_back(forward.scaled(backward_factor));
  }
  // Head: hidden x vocab matmul forward, twice that backward (the final norm is noise); the
  // cross-entropy's softmax over the logits is memory traffic the matmul efficiency absorbs.
  const double head_bytes = vocab * c * options.param_bytes;
  model.head = StepTime{0.0, 2.0 * vocab * c / matmul_rate, 0.0, head_bytes / bandwidth}.scaled(3.0);

  // AdamW reads master, gradient, two moments and writes master, moments and the low-precision
  // copy: about optimizer_bytes_per_element bytes per owned element.
  const auto elements = static_cast<double>(config.num_parameters());
  model.optimizer_s = elements / options.devices * options.optimizer_bytes_per_element / bandwidth;
  model.description = fmt::format(
      "{} ({:.0f} TFLOP/s bf16 peak, matmul efficiency {}, attention efficiency {}, {:.2f} TB/s memory{})",
      device.name, device.peak_bf16_flops / 1e12, options.matmul_efficiency, options.attention_efficiency,
      bandwidth / 1e12, options.gradient_checkpointing ? ", gradient checkpointing" : "");
  return model;
}

}  // namespace odc::sim
