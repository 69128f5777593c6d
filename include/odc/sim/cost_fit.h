#pragma once
// The reference implementation's fitted training cost: a sequence of s tokens takes
// a*u^2 + b*u seconds with u = s / 32000, and every microbatch c seconds more (forward + backward
// with activation checkpointing on an A100; coefficients published for the 1.5B and 7B
// DeepSeek-R1-Distill-Qwen shapes). It serves two purposes:
//   - a compute model (sim.compute_model: fit): per-step times whose microbatch total is exactly
//     c + sum over its sequences of (a*u^2 + b*u), split over the steps in the proportions of the
//     named-device FLOP model (so forward/backward, per-unit and prefetch behaviour keep their shape);
//   - a planner cost model (data.cost_model: fit): a*u^2 + b*u per sequence, as the reference's
//     packing code offers it, and c per microbatch (CostModel::per_microbatch: not part of a
//     sequence's cost; the planners weigh it when they choose counts and splits).
// Other shapes are scaled by FLOPs: a by attention FLOPs per pair and b by linear FLOPs per token,
// from the published fit nearest in linear FLOPs; c by linear interpolation (extrapolation beyond)
// in linear FLOPs per token through the two published fits. That is an assumption, stated as such
// in the fit's description.
#include <string>
#include <vector>

#include "odc/data/cost_model.h"
#include "odc/model/llama_config.h"
#include "odc/sim/compute_model.h"

namespace odc::sim {

inline constexpr double kFitTokensPerUnit = 32000.0;  // u = s / 32000

struct CostFit {
  double a = 0.0;  // seconds per u^2 (attention)
  double b = 0.0;  // seconds per u (linear layers)
  double c = 0.0;  // seconds per microbatch
  std::string source;  // where the coefficients come from (for reports)
  // Seconds of one microbatch holding sequences of these lengths.
  double microbatch_seconds(const std::vector<std::int64_t>& lengths) const;
};

struct PublishedFit {
  std::string name;  // "DeepSeek-R1-Distill-Qwen-1.5B"
  model::LlamaConfig shape;
  CostFit fit;
};
// The published fits, smallest model first.
const std::vector<PublishedFit>& published_fits();

// The published fit of `model`'s shape (vocabulary, hidden, intermediate, layers, heads, KV heads),
// or one scaled by FLOPs from them (see above).
CostFit fit_for_model(const model::LlamaConfig& model);
// "A,B,C" (seconds), e.g. "4.348,8.768,0.951"; odc::Error naming `key` otherwise.
CostFit parse_fit(const std::string& text, const std::string& key);

// The fit spread over the steps of `shape` (c1, c2 of each step give the proportions; fixed costs
// go with the linear share; floors are dropped: the fit's c covers small-step overheads). The
// optimizer time is kept from `shape`.
ComputeModel compute_model_from_fit(const CostFit& fit, const ComputeModel& shape);

// The cost the reference's packing balances with its fit (get_seq_costs_fit): the 7B coefficients
// as its code holds them (a = 4.348357, b = 8.768377; the 1.5B ones only in a comment), whatever the
// model; c = the 7B fit's 0.951 (the packing never sees it; the plan's measures count it).
CostFit reference_packing_fit();

// The planner's per-sequence cost a*u^2 + b*u and per-microbatch c (kind "fit").
data::CostModel planner_cost_from_fit(const CostFit& fit);

}  // namespace odc::sim
