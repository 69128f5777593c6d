#pragma once
// The step-time estimate beside the memory plan (odc-train --plan-memory): the seconds of one
// microbatch's forward and backward (and the recompute mode's rerun of the forward) and of one
// optimizer step, at the run's shape and token cap, before anything runs.
//
// Work: the Backend calls a training microbatch makes (model/llama_model.cpp), predicted with the
// op profiler's categories and cost functions (backend/op_costs.h): GEMMs by role and attention by
// FLOPs, element-wise ops by bytes, transfers and per-microbatch hooks by calls. A profile of the
// same shape records exactly these calls (tests/unit/train/plan/test_step_estimate.cpp).
//
// Rates, one per category: measured, from a device profile (the file gpu_model_throughput
// --profile writes, backend/op_profile.h: each category's work over its seconds, taken as is at
// the run's shape), or nominal, from the device's peak (a named device's datasheet,
// core/device_specs.h, or this CPU's measured FMA peak) times stated efficiencies.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "odc/backend/op_profile.h"
#include "odc/core/dtype.h"
#include "odc/model/llama_config.h"
#include "odc/model/model_keys.h"
#include "odc/model/recompute.h"
#include "odc/train/plan/memory_plan.h"
#include "odc/train/config/run_settings.h"

namespace odc::train {

// What the estimate is of: one microbatch of `tokens` tokens in `sequences` packed sequences of
// equal length (attention grows with their length), and one optimizer step over this rank's
// `optimizer_elements` parameters.
struct StepShape {
  model::LlamaConfig model;
  DeviceKind device = DeviceKind::cpu;
  DType compute = DType::f32;
  model::Recompute recompute = model::parse_recompute(keys::train_recompute.default_value());  // train.recompute
  std::int64_t tokens = 0;
  std::int64_t sequences = 1;
  std::int64_t optimizer_elements = 0;
  // The compute copies are kept through the step (one rank, Backend::keep_weight_copies): they
  // are made once per step, after the optimizer, instead of at every forward and backward acquire.
  bool kept_weight_copies = false;
};

enum class StepPhase : std::uint8_t { forward, backward, recompute, step };
std::string_view phase_name(StepPhase phase);

// A category of the predicted calls in one phase: calls, FLOPs and bytes as the op profiler would
// record them (seconds 0).
struct PredictedOp {
  StepPhase phase;
  backend::OpCategory op;
};
std::vector<PredictedOp> predict_ops(const StepShape& shape);

// One rate per category: FLOP/s, bytes/s, or calls/s by the category's measure.
class StepRates {
 public:
  // Nominal: `gemm_flops` and `attention_flops` per second, `memory_bytes` per second for the
  // element-wise ops and `call_seconds` per latency-bound call; `source` says where they come from.
  static StepRates nominal(double gemm_flops, double attention_flops, double memory_bytes, double call_seconds,
                           std::string source);
  // Measured: each category's work over its seconds in `profile`, read from `file` (for messages).
  // odc::Error naming the file when the profile's device kind is not `device`.
  static StepRates measured(const backend::ProfileDocument& profile, DeviceKind device, const std::string& file);

  // The rate of (name, role): odc::Error naming the profile file and the category when a measured
  // profile lacks it or has no work in it to rate.
  double rate(const backend::OpCategory& op) const;
  const std::string& source() const { return source_; }
  bool is_measured() const { return measured_; }

 private:
  std::string source_;
  bool measured_ = false;
  double gemm_ = 0, attention_ = 0, memory_ = 0, call_seconds_ = 0;
  std::vector<backend::OpCategory> categories_;
  std::string file_;
};

// Nominal rates: the fraction of a peak the estimate assumes, low ends of what the kernels reach
// so that the estimate errs long. A GPU by its datasheet (core/device_specs.h: "h100-sxm", ...):
// GEMMs at 60% of the dense bf16 peak (cuBLASLt at the model's shapes: 60-70% on an H100),
// attention at 35% (the flash kernels: 35-50% forward, less backward), element-wise ops at 60% of
// the HBM bandwidth, 20 us per latency-bound call (a launch and a host round trip).
StepRates nominal_gpu_rates(const std::string& device_name);
// This CPU at `peak_flops` (its measured FMA peak over the compute threads, core/peak_cache.h),
// 1 us per call. fp32: GEMMs at 60% of it (oneDNN's sgemm), attention at 15%, element-wise ops at
// 2 GB/s per thread. The bf16 mode (`compute` bf16: every output rounded, attention in the GPU's
// rounding order) is far slower outside the GEMMs: GEMMs at 30%, attention at 0.2%, element-wise
// ops at 0.5 GB/s per thread. The low ends of a 4-layer, hidden-256, 2 x 1024-token step profiled
// on one core of a shared 2-core EPYC (peak 77 GFLOP/s): fp32 GEMMs 36-60 GFLOP/s, attention
// 23-25, element-wise 1.7-15 GB/s; bf16 mode GEMMs 24-39, attention 0.2-0.3, element-wise 0.6-1.7.
StepRates nominal_cpu_rates(double peak_flops, int threads, DType compute, const std::string& peak_source);

struct EstimateLine {
  StepPhase phase;
  backend::OpCategory op;  // predicted calls, FLOPs, bytes; seconds = work / rate
  double rate = 0.0;
};

struct StepEstimate {
  StepShape shape;
  std::string source;
  bool measured = false;
  std::vector<EstimateLine> lines;

  double seconds(StepPhase phase) const;
  // Forward + backward + recompute of one microbatch.
  double microbatch_seconds() const;
  // For people: the phases' seconds, the source, and the categories that take the most time.
  std::string text() const;
  nlohmann::json to_json() const;
};

StepEstimate estimate_step(const StepShape& shape, const StepRates& rates);

// odc-train --plan-memory's estimate: where the rates come from.
struct EstimateOptions {
  std::string device_profile;  // --device-profile FILE: measured rates ("": nominal)
  std::string device_name;     // --plan-device NAME: a GPU's datasheet for nominal rates ("": h100-sxm)
};
// The estimate at a memory plan's inputs: its model, device, dtype, recomputation and token cap;
// sequences of data.max_length (one of the whole cap without it: the most attention), this rank's
// 1/world of the parameters, copies kept at one rank. Nominal CPU rates take train.peak_flops, else
// this CPU's measured peak (core/peak_cache.h).
StepEstimate plan_step_estimate(const MemoryInputs& inputs, const RunSettings& settings, const EstimateOptions& options);

}  // namespace odc::train
