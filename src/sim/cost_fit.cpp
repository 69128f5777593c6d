#include "odc/sim/cost_fit.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "odc/core/error.h"
#include "odc/core/text.h"

namespace odc::sim {

namespace {

model::LlamaConfig qwen2_shape(std::int64_t vocab, std::int64_t hidden, std::int64_t intermediate, int layers,
                               int heads, int kv_heads) {
  model::LlamaConfig config;
  config.vocab_size = vocab;
  config.hidden_size = hidden;
  config.intermediate_size = intermediate;
  config.num_hidden_layers = layers;
  config.num_attention_heads = heads;
  config.num_key_value_heads = kv_heads;
  config.head_dim = hidden / heads;
  config.attention_bias = true;
  return config;
}

}  // namespace

double CostFit::microbatch_seconds(const std::vector<std::int64_t>& lengths) const {
  if (lengths.empty()) return 0.0;
  double total = c;
  for (const auto length : lengths) {
    const double u = static_cast<double>(length) / kFitTokensPerUnit;
    total += a * u * u + b * u;
  }
  return total;
}

const std::vector<PublishedFit>& published_fits() {
  // The reference implementation's packing code (examples/llm_training/packing.py): seconds of
  // forward + backward with activation checkpointing on an A100, per sequence and per microbatch.
  static const std::vector<PublishedFit> fits = {
      {"DeepSeek-R1-Distill-Qwen-1.5B", qwen2_shape(151936, 1536, 8960, 28, 12, 2),
       {1.982, 2.612, 0.667, "published fit of DeepSeek-R1-Distill-Qwen-1.5B (A100, activation checkpointing)"}},
      {"DeepSeek-R1-Distill-Qwen-7B", qwen2_shape(152064, 3584, 18944, 28, 28, 4),
       {4.348, 8.768, 0.951, "published fit of DeepSeek-R1-Distill-Qwen-7B (A100, activation checkpointing)"}},
  };
  return fits;
}

CostFit fit_for_model(const model::LlamaConfig& model) {
  const auto& fits = published_fits();
  for (const auto& published : fits) {
    if (shape_difference(published.shape, model).none()) return published.fit;
  }
  const double linear = model.linear_flops_per_token();
  const double attention = model.attention_flops_per_pair();
  if (!(linear > 0.0)) fail("sim.compute_model = fit: the model has no linear FLOPs to scale a fit by");
  const PublishedFit* nearest = &fits.front();
  for (const auto& published : fits) {
    if (std::abs(std::log(published.shape.linear_flops_per_token() / linear)) <
        std::abs(std::log(nearest->shape.linear_flops_per_token() / linear))) {
      nearest = &published;
    }
  }
  const double nearest_linear = nearest->shape.linear_flops_per_token();
  CostFit out;
  out.a = nearest->fit.a * attention / nearest->shape.attention_flops_per_pair();
  out.b = nearest->fit.b * linear / nearest_linear;
  const auto& small = fits.front();
  const auto& large = fits.back();
  const double x0 = small.shape.linear_flops_per_token();
  const double x1 = large.shape.linear_flops_per_token();
  out.c = std::max(0.0, small.fit.c + (large.fit.c - small.fit.c) * (linear - x0) / (x1 - x0));
  out.source = fmt::format(
      "fit scaled by FLOPs (an assumption): a, b from {}'s by attention FLOPs/pair x{:.2f} and linear FLOPs/token "
      "x{:.2f}; c linear in linear FLOPs/token through the 1.5B and 7B fits",
      nearest->name, attention / nearest->shape.attention_flops_per_pair(), linear / nearest_linear);
  return out;
}

CostFit parse_fit(const std::string& text, const std::string& key) {
  CostFit fit;
  double* fields[] = {&fit.a, &fit.b, &fit.c};
  const auto items = split_trimmed(text);
  if (items.size() != 3) fail("{}: '{}' is not A,B,C (three numbers of seconds, e.g. 4.348,8.768,0.951)", key, text);
  for (std::size_t i = 0; i < 3; ++i) {
    const std::string& item = items[i];
    char* end = nullptr;
    const double value = std::strtod(item.c_str(), &end);
    if (item.empty() || end != item.c_str() + item.size() || !std::isfinite(value) || value < 0.0) {
      fail("{}: '{}' in '{}' is not a number of seconds >= 0", key, item, text);
    }
    *fields[i] = value;
  }
  if (!(fit.a > 0.0 || fit.b > 0.0)) fail("{}: '{}' has neither a length term a nor b", key, text);
  fit.source = fmt::format("fit given in {}", key);
  return fit;
}

ComputeModel compute_model_from_fit(const CostFit& fit, const ComputeModel& shape) {
  // A microbatch's sum of s^2 is 2P - T (P causal pairs, T tokens), so its time
  // c + sum(a*u^2 + b*u) = c + (b/K - a/K^2) * T + (2a/K^2) * P with K = 32000.
  const double k = kFitTokensPerUnit;
  const double per_token = fit.b / k - fit.a / (k * k);
  const double per_pair = 2.0 * fit.a / (k * k);
  double shape_token = shape.head.c1;
  double shape_pair = shape.head.c2;
  for (std::size_t u = 0; u < shape.forward.size(); ++u) {
    shape_token += shape.forward[u].c1 + shape.backward[u].c1;
    shape_pair += shape.forward[u].c2 + shape.backward[u].c2;
  }
  if (!(shape_token > 0.0)) fail("compute_model_from_fit: the shape model has no per-token time to split the fit by");
  if (fit.a > 0.0 && !(shape_pair > 0.0)) {
    fail("compute_model_from_fit: the shape model has no attention time to split the fit's a by");
  }
  auto split = [&](const StepTime& step) {
    return StepTime{fit.c * step.c1 / shape_token, per_token * step.c1 / shape_token,
                    shape_pair > 0.0 ? per_pair * step.c2 / shape_pair : 0.0, 0.0};
  };
  ComputeModel out;
  for (std::size_t u = 0; u < shape.forward.size(); ++u) {
    out.forward.push_back(split(shape.forward[u]));
    out.backward.push_back(split(shape.backward[u]));
  }
  out.head = split(shape.head);
  out.optimizer_s = shape.optimizer_s;
  out.description = fmt::format("a={:.4g} s, b={:.4g} s, c={:.4g} s per microbatch, u = s/32000: {}", fit.a, fit.b,
                                fit.c, fit.source);
  return out;
}

CostFit reference_packing_fit() {
  return {4.348357, 8.768377, 0.951,
          "the reference's packing fit get_seq_costs_fit: the 7B coefficients whatever the model"};
}

data::CostModel planner_cost_from_fit(const CostFit& fit) {
  const double k = kFitTokensPerUnit;
  data::CostModel cost = data::CostModel::quadratic(fit.a / (k * k), fit.b / k);
  cost.kind = "fit";
  cost.per_microbatch = fit.c;
  return cost;
}

}  // namespace odc::sim
