#pragma once
// odc-sim's tunables (declared once, with defaults and docs) and the resolved simulation inputs
// they describe: model, lengths, planner settings, compute model and links.
//
// The defaults are the paper's golden setting with synthetic lengths: DeepSeek-R1-Distill-Qwen-1.5B
// on 8 A100-80GB, LongAlign-like log-normal lengths (max 64K), 4 sequences per device per step,
// packing ratio 1; compute from the named device's FLOPs (configs/paper/ use the reference's fit).
#include <cstdint>
#include <string>
#include <vector>

#include "odc/core/config.h"
#include "odc/data/planner.h"
#include "odc/model/llama_config.h"
#include "odc/sim/compute_model.h"
#include "odc/sim/layout_costs.h"
#include "odc/sim/lengths.h"
#include "odc/sim/link_model.h"
#include "odc/sim/schedule.h"

namespace odc::sim {

std::vector<TunableSpec> sim_tunables();

// Declared defaults < YAML file (if any) < environment (ODC_SIM_DEVICES, ...) < assignments.
Config load_sim_config(const std::string& config_file, const std::vector<std::string>& assignments);

// A schedule to simulate: "collective+lb_micro", "odc+lb_mini", ...
struct Method {
  CommKind comm = CommKind::odc;
  data::Balance balance = data::Balance::lb_mini;
  std::string name() const;
  bool operator==(const Method&) const = default;
};
// Parses "COMM+BALANCE"; odc::Error naming `key` for a bad name or collective+lb_mini[_equal] or
// collective+ref_lb_mini (collectives need equal microbatch counts, which LB-Mini does not give).
Method parse_method(const std::string& text, const std::string& key);
std::vector<Method> parse_methods(const std::string& list, const std::string& key);  // comma-separated
std::vector<Method> all_methods();

struct SimSetup {
  std::string label;
  model::LlamaConfig model;
  LengthPool pool;
  LengthStats pool_stats;
  std::string published_lengths;  // data.published_lengths: the statistics the pool stands in for
  int devices = 1;
  std::int64_t minibatch_size = 1;
  std::int64_t minibatches = 1;
  std::int64_t skip_minibatches = 0;  // drawn from the sampler and discarded before simulating
  std::int64_t token_cap = 0;
  bool shuffle = true;
  std::uint64_t seed = 0;
  data::CostModel cost;
  // What the reference's planners (ref_lb_micro, ref_lb_mini) balance and how ref_lb_mini picks its
  // split (sim.reference_cost, sim.reference_split).
  data::CostModel reference_cost;
  data::ReferenceSplit reference_split = data::ReferenceSplit::spread;
  ComputeModel compute;
  LinkModel link;
  Sharding sharding = Sharding::full;  // sim.sharding (hybrid: optimizer_s is of a node's shard)
  UnitBytes collective_bytes;
  UnitBytes odc_bytes;  // differs when sim.odc_param_bytes is set (fp32 gathers, as the reference)
  int prefetch_depth = 1;
  int max_outstanding_reductions = 3;
  double collective_compute_factor = 1.0;
  bool dummy_padding = false;                // sim.collective_padding = dummy (ScheduleOptions::dummy_padding)
  bool fsdp_root_unit = false;               // sim.fsdp_root_unit (ScheduleOptions::fsdp_root_unit)
  bool shared_link = true;                   // sim.link_contention
  double accumulate_seconds_per_byte = 0.0;  // ODC owner-side accumulation (sim.accumulate_bytes_per_element)
  // Context parallelism (sim.context_parallel): sequences longer than the token cap split over
  // several devices, odc methods by the planner's dynamic groups (data::PlanInput::context_dynamic,
  // at most max_context_degree devices, 0 = all), collective methods by one static degree for the
  // run (context_degree: sim.context_degree, or the smallest that fits the longest sequence and
  // divides the devices). The planner's cost carries the exchange (CostModel::exchange_per_token).
  bool context_parallel = false;
  int context_degree = 1;
  int max_context_degree = 0;
  ExchangeModel exchange;
  std::vector<Method> methods;
  Method baseline;
  std::vector<std::string> notes;  // calibration fits and other facts worth reporting
  std::string measured;            // calibrated: what the trace itself measured, to compare with
};

// Builds the inputs, checking what the schema's ranges cannot (methods, devices, files, values that
// depend on each other; odc::Error naming the key). `default_label` is used when sim.label is
// empty (odc-sim passes the config file's stem).
SimSetup build_setup(const Config& config, const std::string& default_label);

}  // namespace odc::sim
