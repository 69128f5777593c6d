#pragma once
// Running a simulation: the same global minibatches (drawn from the length pool with odc-train's
// Sampler) are planned by the real planner for every method and replayed by the schedule model;
// the results are averaged per method and compared with the baseline.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "odc/sim/schedule.h"
#include "odc/sim/sim_config.h"

namespace odc::sim {

struct MethodResult {
  Method method;
  double minibatch_time_s = 0.0;          // mean over minibatches, optimizer included
  double samples_per_s_per_device = 0.0;  // minibatch_size / minibatch_time_s
  double speedup = 0.0;                   // baseline minibatch time / this one
  double bubble_simulated = 0.0;          // sum idle / sum (D * time to the barrier), all minibatches
  double bubble_planned = 0.0;            // mean of the planner's estimate for this comm
  // The same plans' bubble as the reference's packing would estimate it (its 7B fit, no per-microbatch
  // cost): the kind of figure the paper reports. -1 when not defined (context-parallel plans).
  double bubble_reference_estimate = 0.0;
  double zero_overhead_bound = 0.0;       // the speedup over the baseline if communication were free
  double compute_s = 0.0;                 // per device and minibatch, mean
  double gather_wait_s = 0.0;             // per device and minibatch, mean
  double push_wait_s = 0.0;
  double accumulate_s = 0.0;              // odc: owner-side adds of pushed slices, per device and minibatch
  double barrier_wait_s = 0.0;
  double optimizer_s = 0.0;
  double microbatches_per_device = 0.0;   // mean over devices and minibatches
  double inter_node_bytes = 0.0;          // per minibatch, mean: bytes that crossed node boundaries
  double refresh_s = 0.0;                 // hpz: the secondary copy's refresh, per minibatch
  double replica_sum_s = 0.0;             // hybrid: the cross-node gradient all-reduce, per minibatch
  double exchange_s = 0.0;                // context parallelism: exchanges and group waits, per device and minibatch
  double context_groups = 0.0;            // dynamic context groups per minibatch, mean
  double padding_s = 0.0;                 // collective, dummy padding: dummy microbatches' steps, per device and minibatch
  MinibatchTimeline first;                // the first minibatch, with intervals (for plots)
};

struct SimResults {
  SimSetup setup;
  double mean_length = 0.0;  // of the simulated sequences
  std::int64_t max_length = 0;
  std::vector<MethodResult> methods;  // in sim.methods order
};

SimResults run_simulation(const SimSetup& setup);

// One JSON object per method (the odc-sim output line).
nlohmann::ordered_json method_json(const SimResults& results, const MethodResult& method);
// A markdown table of all methods, with a heading line describing the setting.
std::string markdown_table(const SimResults& results);
// The first minibatch of every method: per device busy intervals (tools/plot_sim.py draws them).
nlohmann::json timelines_json(const SimResults& results);

}  // namespace odc::sim
