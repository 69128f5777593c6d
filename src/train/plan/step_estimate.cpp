#include "odc/train/plan/step_estimate.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "odc/backend/backend.h"
#include "odc/core/device_specs.h"
#include "odc/core/peak_cache.h"
#include "odc/core/error.h"
#include "odc/model/units.h"

namespace odc::train {

using backend::OpCategory;
using backend::OpCost;
namespace cost = backend::op_cost;

std::string_view phase_name(StepPhase phase) {
  switch (phase) {
    case StepPhase::forward: return "forward";
    case StepPhase::backward: return "backward";
    case StepPhase::recompute: return "recompute";
    case StepPhase::step: return "step";
  }
  return "?";
}

namespace {

class Prediction {
 public:
  // `calls` calls costing `each` apiece.
  void add(StepPhase phase, std::string_view name, std::string_view role, std::int64_t calls, OpCost each = {}) {
    if (calls <= 0) return;
    auto it = std::find_if(ops_.begin(), ops_.end(), [&](const PredictedOp& p) {
      return p.phase == phase && p.op.name == name && p.op.role == role;
    });
    if (it == ops_.end()) it = ops_.insert(ops_.end(), {phase, {std::string(name), std::string(role), 0, 0.0, 0.0, 0.0}});
    it->op.calls += calls;
    it->op.flops += each.flops * static_cast<double>(calls);
    it->op.bytes += each.bytes * static_cast<double>(calls);
  }
  std::vector<PredictedOp> take() { return std::move(ops_); }

 private:
  std::vector<PredictedOp> ops_;
};

}  // namespace

// The calls of LlamaModel::train_microbatch (begin_microbatch, forward_body, the head, the layers'
// backward with recomputation, the embedding's backward; decoder_layer.cpp's layer_forward and
// layer_backward), then the trainer's gradient norm and AdamW.
std::vector<PredictedOp> predict_ops(const StepShape& s) {
  const model::LlamaConfig& m = s.model;
  const std::int64_t t = s.tokens;
  if (t <= 0) return {};
  ODC_CHECK(s.sequences >= 1 && s.sequences <= t, "predict_ops: {} sequences of {} tokens", s.sequences, t);
  const std::int64_t layers = m.num_hidden_layers, c = m.hidden_size, q = m.q_dim(), kv = m.kv_dim();
  const std::int64_t f = m.intermediate_size, v = m.vocab_size, heads = m.num_attention_heads;
  const std::int64_t kv_heads = m.num_key_value_heads, hd = m.head_dim;
  const auto a = static_cast<std::int64_t>(dtype_size(backend::activation_dtype_of(s.device)));
  const std::int64_t copy = backend::weight_copy_element_bytes(s.device, s.compute);
  const std::int64_t w = copy > 0 ? copy : 4;  // the op reads the compute copy, else the fp32 unit
  const double length = static_cast<double>(t) / static_cast<double>(s.sequences);
  const double pairs = static_cast<double>(s.sequences) * length * (length + 1) / 2.0;
  const std::int64_t rows = t - s.sequences;  // every position but each sequence's last predicts a token
  const std::int64_t chunk = backend::head_chunk_rows_of(s.device, v);
  const std::int64_t chunks = (rows + chunk - 1) / chunk;
  const auto units = model::build_unit_layouts(m);
  const std::int64_t layer_numel = layers > 0 ? units[1].numel : 0;
  const bool tied = m.tie_word_embeddings;
  const bool qk = m.qk_norm;
  using enum StepPhase;
  Prediction p;

  // begin_microbatch: token ids, sequence bounds, positions; the attention's tables; RoPE's.
  p.add(forward, "upload", "", 3);
  p.add(forward, "prepare_microbatch", "", 1);
  p.add(forward, "rope_tables", "", 1, cost::rope_tables(t, hd));
  // The compute copies: every unit at its forward acquire and the layers again at their backward
  // one, or (kept) once per step; the tied head hands unit 0's copy out again.
  const std::int64_t forward_copies = units.front().numel + layers * layer_numel + units.back().numel;
  const StepPhase first_casts = s.kept_weight_copies ? step : forward;
  p.add(first_casts, "weights", "cast", 1, cost::weight_cast(forward_copies, copy));
  p.add(first_casts, "weights", "cast", layers + 1, {});
  p.add(forward, "weights", "reuse", tied ? 1 : 0);
  if (s.kept_weight_copies) {
    p.add(backward, "weights", "reuse", layers);
  } else {
    p.add(backward, "weights", "cast", layers, cost::weight_cast(layer_numel, copy));
  }
  p.add(forward, "embedding_forward", "", 1, cost::embedding_forward(t, c, a, w));

  // A layer's forward up to the MLP's input (all of it that recomputation reruns).
  const auto layer_front = [&](StepPhase phase, bool attention) {
    p.add(phase, "rmsnorm_forward", "", 2 * layers, cost::rmsnorm_forward(t, c, a, w));
    p.add(phase, "linear_forward", "q", layers, cost::linear_forward(t, c, q));
    p.add(phase, "linear_forward", "k", layers, cost::linear_forward(t, c, kv));
    p.add(phase, "linear_forward", "v", layers, cost::linear_forward(t, c, kv));
    if (qk) {
      p.add(phase, "rmsnorm_forward", "", layers, cost::rmsnorm_forward(t * heads, hd, a, w));
      p.add(phase, "rmsnorm_forward", "", layers, cost::rmsnorm_forward(t * kv_heads, hd, a, w));
    }
    p.add(phase, "rope_forward", "", layers, cost::rope(t, heads, hd, a));
    p.add(phase, "rope_forward", "", layers, cost::rope(t, kv_heads, hd, a));
    if (attention) p.add(phase, "attention_forward", "", layers, cost::attention_forward(pairs, heads, hd));
    p.add(phase, "linear_forward_residual", "o_proj", layers, cost::linear_forward(t, q, c));
    p.add(phase, "linear_forward", "gate_up", layers, cost::linear_forward(t, c, 2 * f));
  };
  layer_front(forward, true);
  p.add(forward, "swiglu_forward", "", layers, cost::swiglu_forward(t, f, a));
  p.add(forward, "linear_forward_residual", "down", layers, cost::linear_forward(t, f, c));

  // The head: the final norm, then per chunk of target rows their logits, loss and gradient.
  p.add(forward, "rmsnorm_forward", "", 1, cost::rmsnorm_forward(t, c, a, w));
  p.add(forward, "zero", "", 1, cost::zero(t * c, a));
  p.add(forward, "upload", "", 3);
  if (chunks > 0) {  // the costs are linear in the rows: the chunks' sum is the rows' cost
    p.add(forward, "gather_rows", "", 1, cost::move_rows(rows, c, a));
    p.add(forward, "gather_rows", "", chunks - 1);
    p.add(forward, "linear_forward", "lm_head", 1, cost::linear_forward(rows, c, v));
    p.add(forward, "linear_forward", "lm_head", chunks - 1);
    p.add(forward, "cross_entropy", "", 1, cost::cross_entropy(rows, v, a, true));
    p.add(forward, "cross_entropy", "", chunks - 1);
    p.add(backward, "linear_backward", "lm_head", 1, cost::linear_backward(rows, c, v, true, true));
    p.add(backward, "linear_backward", "lm_head", chunks - 1);
    p.add(backward, "scatter_rows", "", 1, cost::move_rows(rows, c, a));
    p.add(backward, "scatter_rows", "", chunks - 1);
  }
  p.add(forward, "resolve_loss", "", 1);
  p.add(backward, "rmsnorm_backward", "", 1, cost::rmsnorm_backward(t, c, a, w, false));

  // The layers' backward, each after its recomputed forward.
  if (s.recompute != model::Recompute::none) layer_front(recompute, s.recompute == model::Recompute::full);
  p.add(backward, "swiglu_forward", "", layers, cost::swiglu_forward(t, f, a));
  p.add(backward, "linear_backward", "down", layers, cost::linear_backward(t, f, c, true, true));
  p.add(backward, "swiglu_backward", "", layers, cost::swiglu_backward(t, f, a));
  p.add(backward, "linear_backward", "gate_up", layers, cost::linear_backward(t, c, 2 * f, true, true));
  p.add(backward, "rmsnorm_backward", "", 2 * layers, cost::rmsnorm_backward(t, c, a, w, true));
  p.add(backward, "linear_backward", "o_proj", layers, cost::linear_backward(t, q, c, true, true));
  p.add(backward, "attention_backward", "", layers, cost::attention_backward(pairs, heads, hd));
  p.add(backward, "rope_backward", "", layers, cost::rope(t, heads, hd, a));
  p.add(backward, "rope_backward", "", layers, cost::rope(t, kv_heads, hd, a));
  if (qk) {
    p.add(backward, "rmsnorm_backward", "", layers, cost::rmsnorm_backward(t * heads, hd, a, w, false));
    p.add(backward, "rmsnorm_backward", "", layers, cost::rmsnorm_backward(t * kv_heads, hd, a, w, false));
  }
  p.add(backward, "linear_backward", "q", layers, cost::linear_backward(t, c, q, true, true));
  p.add(backward, "linear_backward", "k", layers, cost::linear_backward(t, c, kv, true, true));
  p.add(backward, "linear_backward", "v", layers, cost::linear_backward(t, c, kv, true, true));
  p.add(backward, "embedding_backward", "", 1, cost::embedding_backward(t, c, a));

  // The optimizer step: the gradient norm and AdamW over this rank's parameters.
  p.add(step, "sum_of_squares", "", 1, cost::sum_of_squares(s.optimizer_elements));
  p.add(step, "adamw_step", "", 1, cost::adamw(s.optimizer_elements));
  return p.take();
}

StepRates StepRates::nominal(double gemm_flops, double attention_flops, double memory_bytes, double call_seconds,
                             std::string source) {
  ODC_CHECK(gemm_flops > 0 && attention_flops > 0 && memory_bytes > 0 && call_seconds > 0,
            "nominal rates: GEMM {} FLOP/s, attention {} FLOP/s, memory {} B/s, {} s per call", gemm_flops,
            attention_flops, memory_bytes, call_seconds);
  StepRates r;
  r.source_ = std::move(source);
  r.gemm_ = gemm_flops;
  r.attention_ = attention_flops;
  r.memory_ = memory_bytes;
  r.call_seconds_ = call_seconds;
  return r;
}

StepRates StepRates::measured(const backend::ProfileDocument& profile, DeviceKind device, const std::string& file) {
  const std::string kind = device == DeviceKind::cuda ? "cuda" : "cpu";
  if (profile.device != kind) {
    fail("device profile {}: the field 'device' is '{}' but the run computes on {} (model.device): its rates are "
         "another device's; profile on the run's kind of device (gpu_model_throughput --profile, --cpu-tiny for the CPU)",
         file, profile.device, kind);
  }
  StepRates r;
  r.measured_ = true;
  r.file_ = file;
  r.categories_ = profile.profile.ops;
  r.source_ = fmt::format("measured: {} ({}, {}, {} tokens in {} sequence(s), recompute {})", file,
                          profile.device_description, profile.shape, profile.tokens, profile.sequences,
                          profile.recompute);
  return r;
}

double StepRates::rate(const OpCategory& op) const {
  if (!measured_) {
    switch (op.measure()) {
      case backend::OpMeasure::flops: return op.name.starts_with("attention") ? attention_ : gemm_;
      case backend::OpMeasure::bytes: return memory_;
      case backend::OpMeasure::calls: return 1.0 / call_seconds_;
    }
  }
  const auto it = std::find_if(categories_.begin(), categories_.end(),
                               [&](const OpCategory& c) { return c.name == op.name && c.role == op.role; });
  if (it == categories_.end()) {
    fail("device profile {}: no '{}' among its ops, which the run's step makes: profile the same kind of step "
         "(gpu_model_throughput --profile)", file_, op.label());
  }
  if (!(it->work() > 0)) {
    fail("device profile {}: '{}' has no {} to take a rate from (profiled without that work)", file_, op.label(),
         backend::measure_name(it->measure()));
  }
  // A category too quick for the clock costs nothing here either.
  return it->seconds > 0 ? it->work() / it->seconds : std::numeric_limits<double>::infinity();
}

StepRates nominal_gpu_rates(const std::string& device_name) {
  const DeviceSpec& spec = device_spec(device_name);
  return StepRates::nominal(0.6 * spec.peak_bf16_flops, 0.35 * spec.peak_bf16_flops, 0.6 * spec.memory_bandwidth,
                            20e-6,
                            fmt::format("nominal: {} datasheet ({:.0f} TFLOP/s dense bf16, {:.2f} TB/s) at 60% for "
                                        "GEMMs, 35% for attention, 60% of the bandwidth; 20 us per call",
                                        spec.name, spec.peak_bf16_flops / 1e12, spec.memory_bandwidth / 1e12));
}

StepRates nominal_cpu_rates(double peak_flops, int threads, DType compute, const std::string& peak_source) {
  const bool rounds = compute == DType::bf16;
  const double gemm = rounds ? 0.3 : 0.6, attention = rounds ? 0.002 : 0.15, bytes = rounds ? 0.5e9 : 2e9;
  return StepRates::nominal(gemm * peak_flops, attention * peak_flops, bytes * threads, 1e-6,
                            fmt::format("nominal: this CPU's peak {:.1f} GFLOP/s ({}) at {:g}% for GEMMs, {:g}% for "
                                        "attention ({} mode); {:g} GB/s per thread for element-wise ops; 1 us per call",
                                        peak_flops / 1e9, peak_source, gemm * 100, attention * 100,
                                        rounds ? "bf16" : "fp32", bytes / 1e9));
}

double StepEstimate::seconds(StepPhase phase) const {
  double s = 0.0;
  for (const auto& line : lines) s += line.phase == phase ? line.op.seconds : 0.0;
  return s;
}

double StepEstimate::microbatch_seconds() const {
  return seconds(StepPhase::forward) + seconds(StepPhase::backward) + seconds(StepPhase::recompute);
}

std::string StepEstimate::text() const {
  std::string out = fmt::format(
      "step estimate at {} tokens in {} sequence(s), recompute {}: microbatch {:.3f} ms (forward {:.3f}, backward "
      "{:.3f}, recompute {:.3f}); per step {:.3f} ms (optimizer{})\n  rates: {}\n",
      shape.tokens, shape.sequences, model::recompute_name(shape.recompute), microbatch_seconds() * 1e3,
      seconds(StepPhase::forward) * 1e3, seconds(StepPhase::backward) * 1e3, seconds(StepPhase::recompute) * 1e3,
      seconds(StepPhase::step) * 1e3, shape.kept_weight_copies ? ", the kept compute copies" : "", source);
  // The categories over all phases, most time first.
  backend::OpProfile merged;
  for (const auto& line : lines) {
    OpCategory& c = merged.at(line.op.name, line.op.role);
    c.calls += line.op.calls;
    c.seconds += line.op.seconds;
  }
  std::stable_sort(merged.ops.begin(), merged.ops.end(),
                   [](const OpCategory& x, const OpCategory& y) { return x.seconds > y.seconds; });
  const double total = merged.seconds();
  out += "  most time:";
  for (std::size_t i = 0; i < std::min<std::size_t>(merged.ops.size(), 6); ++i) {
    const OpCategory& c = merged.ops[i];
    out += fmt::format("{} {} {:.3f} ms ({:.0f}%)", i == 0 ? "" : ",", c.label(), c.seconds * 1e3,
                       total > 0 ? 100.0 * c.seconds / total : 0.0);
  }
  return out + "\n";
}

nlohmann::json StepEstimate::to_json() const {
  return {{"source", measured ? "profile" : "nominal"},
          {"rates", source},
          {"tokens", shape.tokens},
          {"sequences", shape.sequences},
          {"forward_seconds", seconds(StepPhase::forward)},
          {"backward_seconds", seconds(StepPhase::backward)},
          {"recompute_seconds", seconds(StepPhase::recompute)},
          {"microbatch_seconds", microbatch_seconds()},
          {"optimizer_seconds", seconds(StepPhase::step)}};
}

StepEstimate estimate_step(const StepShape& shape, const StepRates& rates) {
  StepEstimate e;
  e.shape = shape;
  e.source = rates.source();
  e.measured = rates.is_measured();
  for (auto& p : predict_ops(shape)) {
    EstimateLine line{p.phase, std::move(p.op), 0.0};
    if (line.op.work() > 0) {
      line.rate = rates.rate(line.op);
      line.op.seconds = line.op.work() / line.rate;
    }
    e.lines.push_back(std::move(line));
  }
  return e;
}

StepEstimate plan_step_estimate(const MemoryInputs& inputs, const RunSettings& settings, const EstimateOptions& options) {
  StepShape shape;
  shape.model = inputs.model;
  shape.device = inputs.device;
  shape.compute = inputs.compute;
  shape.recompute = inputs.recompute;
  shape.tokens = inputs.tokens;
  const std::int64_t length = settings.data.max_length;
  shape.sequences = length > 0 && length < inputs.tokens ? (inputs.tokens + length - 1) / length : 1;
  shape.optimizer_elements = (inputs.model.num_parameters() + inputs.world - 1) / inputs.world;
  shape.kept_weight_copies = inputs.world == 1 && inputs.keep_weight_copies;
  if (!options.device_profile.empty()) {
    return estimate_step(shape, StepRates::measured(backend::read_profile(options.device_profile), inputs.device,
                                                    options.device_profile));
  }
  if (inputs.device != DeviceKind::cpu) {
    const std::string name = options.device_name.empty() ? "h100-sxm" : options.device_name;
    StepRates rates = nominal_gpu_rates(name);
    StepEstimate e = estimate_step(shape, rates);
    if (options.device_name.empty()) e.source += " (assumed: --plan-device names the GPU)";
    return e;
  }
  const int threads = settings.train.threads;
  if (settings.train.peak_flops > 0) {
    return estimate_step(shape, nominal_cpu_rates(settings.train.peak_flops, threads, inputs.compute, "train.peak_flops"));
  }
  const CachedPeak peak = cpu_peak_flops(threads);
  return estimate_step(shape, nominal_cpu_rates(peak.flops, threads, inputs.compute, peak.describe()));
}

}  // namespace odc::train
