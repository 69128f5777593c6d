#pragma once
// Calibrating the simulator's compute model from a trace written by odc-train (train.trace_file):
// a Chrome trace-event JSON object whose "otherData" names the world size and the model, with
// complete ("ph": "X") events in categories forward / backward / head (pure compute of one unit
// for one microbatch, args unit, tokens, pairs), wait, barrier, optimizer and microbatch.
//
// Per unit and phase the step time is fitted by least squares as t = c0 + c1*tokens + c2*pairs
// with every coefficient >= 0 (the exact non-negative solution: every subset of the columns is
// solved and the best feasible one kept; a column that is zero in every sample is dropped, e.g.
// pairs for the embedding). The optimizer time is the mean "optimizer" event, rescaled from the
// traced world size to the simulated one (each device updates 1/D of the model).
//
// Communication is not fitted: the trace's waits measure only the part of a transfer that compute
// did not hide, not the transfer itself, so link speeds come from the sim.* keys.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "odc/model/llama_config.h"
#include "odc/sim/compute_model.h"

namespace odc::sim {

// Least-squares t = c0 + c1*tokens + c2*pairs with c0, c1, c2 >= 0; `where` names the samples in
// errors. odc::Error for mismatched sizes or no samples.
StepTime fit_step_time(const std::vector<double>& tokens, const std::vector<double>& pairs,
                       const std::vector<double>& seconds, const std::string& where);

// What a trace says beyond the fits, for reports.
struct TraceSummary {
  int world_size = 0;
  std::string comm;     // otherData.comm
  std::string balance;  // otherData.balance
  int steps = 0;                       // distinct optimizer steps seen
  double minibatch_s = 0.0;            // mean per step: first event start to optimizer end
  double gather_wait_s = 0.0;          // mean per step and rank
  double push_wait_s = 0.0;            // mean per step and rank
  double barrier_s = 0.0;              // mean per step and rank: barrier events and "barrier wait"s
  double compute_s = 0.0;              // mean per step and rank (forward + backward + head)
  double optimizer_s = 0.0;            // mean optimizer event at the traced world size
};

struct Calibration {
  model::LlamaConfig model;  // from otherData.model
  ComputeModel compute;      // optimizer_s at the traced world size; see rescaled_optimizer
  TraceSummary summary;
  std::vector<std::string> fit_notes;  // one line per unit and phase: samples and coefficients
};

// Parses and fits. `source` names the trace in errors (file name).
Calibration calibrate_from_trace(const nlohmann::json& trace, const std::string& source);
Calibration calibrate_from_trace_file(const std::string& path);

// The traced optimizer time for `devices` devices (the shard shrinks as 1/devices).
double rescaled_optimizer(const Calibration& calibration, int devices);

// Throws odc::Error when the trace's model and the simulated one differ in a field that changes
// per-unit compute (the fits are per unit of the traced model), naming the field.
void check_same_shape(const model::LlamaConfig& traced, const model::LlamaConfig& simulated,
                      const std::string& source);

}  // namespace odc::sim
