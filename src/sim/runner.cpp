#include "odc/sim/runner.h"

#include <algorithm>
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "odc/core/error.h"
#include "odc/data/packing.h"
#include "odc/sim/cost_fit.h"

namespace odc::sim {

namespace {

// Running sums of one method over the simulated minibatches.
struct Accumulator {
  double time = 0.0, barrier_span = 0.0, idle = 0.0, planned = 0.0, free_time = 0.0;
  double compute = 0.0, gather_wait = 0.0, push_wait = 0.0, barrier_wait = 0.0, optimizer = 0.0, accumulate = 0.0;
  double microbatches = 0.0, inter_node_bytes = 0.0, refresh = 0.0, replica_sum = 0.0;
  double exchange = 0.0, context_groups = 0.0, padding = 0.0, reference_estimate = 0.0;
  bool reference_estimate_missing = false;
  bool recorded_first = false;
};

void accumulate(Accumulator& acc, const MinibatchTimeline& timeline) {
  const auto d = static_cast<double>(timeline.devices.size());
  acc.time += timeline.total_s();
  acc.barrier_span += timeline.barrier_s * d;
  acc.optimizer += timeline.optimizer_s;
  acc.inter_node_bytes += timeline.inter_node_bytes;
  acc.refresh += timeline.refresh_s;
  acc.replica_sum += timeline.replica_sum_s;
  for (std::size_t i = 0; i < timeline.devices.size(); ++i) {
    const auto& device = timeline.devices[i];
    acc.idle += timeline.barrier_s - device.compute_s;
    acc.compute += device.compute_s / d;
    acc.gather_wait += device.gather_wait_s / d;
    acc.push_wait += device.push_wait_s / d;
    acc.accumulate += device.accumulate_s / d;
    acc.exchange += device.exchange_s / d;
    acc.padding += device.padding_s / d;
    acc.barrier_wait += timeline.barrier_wait_s(i) / d;
    acc.microbatches += device.microbatches / d;
  }
}

// The bubble of `plan` with every microbatch costed by `cost` (its per_microbatch as c). Plans with
// context groups or a static degree are not recosted (their shares' costs are the planner's): -1.
double bubble_under(data::Plan plan, const std::vector<std::int64_t>& lengths, const data::CostModel& cost,
                    CommKind comm) {
  if (!plan.groups.empty() || plan.context_degree > 1) return -1.0;
  plan.per_microbatch = cost.per_microbatch;
  for (auto& rank : plan.ranks) {
    rank.cost = 0.0;
    for (std::size_t m = 0; m < rank.microbatches.size(); ++m) {
      double microbatch = 0.0;
      for (const auto i : rank.microbatches[m]) microbatch += cost.cost(lengths[static_cast<std::size_t>(i)]);
      rank.microbatch_costs[m] = microbatch;
      rank.cost += microbatch;
    }
  }
  return comm == CommKind::odc ? plan.bubble_odc() : plan.bubble_collective();
}

// The reference's own packing cost (the paper's bubble figures are "estimated by the packing
// algorithm"): its get_seq_costs_fit (the 7B a*u^2 + b*u whatever the model), without the
// per-microbatch c it never sees.
data::CostModel reference_estimate_cost() {
  data::CostModel cost = planner_cost_from_fit(reference_packing_fit());
  cost.per_microbatch = 0.0;
  return cost;
}

// The layout as the table's heading names it; on one node hybrid and hpz cost what full does.
std::string sharding_text(const SimSetup& s) {
  const std::string name(distributed::sharding_name(s.sharding));
  if (s.sharding == Sharding::full || s.link.spans_nodes()) return name;
  return name + " (one node: as full)";
}

// How a method splits long sequences: "off", "dynamic" (odc) or "static D" (collective).
std::string context_text(const SimSetup& s, const Method& method) {
  if (!s.context_parallel) return "off";
  return method.comm == CommKind::odc ? std::string("dynamic") : fmt::format("static {}", s.context_degree);
}

}  // namespace

SimResults run_simulation(const SimSetup& setup) {
  SimResults results;
  results.setup = setup;
  const int devices = setup.devices;
  // Free links on the same nodes: the layout's sync domains (hybrid's per-node collectives) stay.
  LinkModel free_link = LinkModel::free(devices);
  free_link.devices_per_node = setup.link.devices_per_node;

  std::vector<Method> simulated = setup.methods;
  if (std::find(simulated.begin(), simulated.end(), setup.baseline) == simulated.end()) {
    simulated.push_back(setup.baseline);  // needed for speedups even when not reported
  }
  std::vector<Accumulator> acc(simulated.size());
  std::vector<MinibatchTimeline> firsts(simulated.size());

  data::Sampler sampler(static_cast<std::int64_t>(setup.pool.lengths.size()), setup.seed, setup.shuffle);
  double length_sum = 0.0;
  std::int64_t sequences = 0;
  ScheduleOptions options;
  options.prefetch_depth = setup.prefetch_depth;
  options.max_outstanding_reductions = setup.max_outstanding_reductions;
  options.collective_compute_factor = setup.collective_compute_factor;
  options.shared_link = setup.shared_link;
  options.accumulate_seconds_per_byte = setup.accumulate_seconds_per_byte;
  options.sharding = setup.sharding;
  options.dummy_padding = setup.dummy_padding;
  options.fsdp_root_unit = setup.fsdp_root_unit;
  ExchangeModel free_exchange = setup.exchange;  // the zero-overhead bound's exchanges are free too
  free_exchange.link = free_link;
  ScheduleOptions free_options = options;  // the zero-overhead bound: no transfer or accumulation costs
  free_options.accumulate_seconds_per_byte = 0.0;
  free_options.record_intervals = false;
  const data::CostModel estimate_cost = reference_estimate_cost();
  for (std::int64_t step = 0; step < setup.skip_minibatches; ++step) sampler.next(setup.minibatch_size * devices);
  for (std::int64_t step = 0; step < setup.minibatches; ++step) {
    data::PlanInput input;
    input.world_size = devices;
    input.token_cap = setup.token_cap;
    if (setup.sharding == distributed::Sharding::hybrid && devices > setup.link.devices_per_node) {
      // As the trainer plans: lb_micro equalizes microbatch counts within a node's collectives.
      for (int d = 0; d < devices; ++d) input.group_of_rank.push_back(d / setup.link.devices_per_node);
    }
    for (const auto index : sampler.next(setup.minibatch_size * devices)) {
      const auto length = setup.pool.lengths[static_cast<std::size_t>(index)];
      input.lengths.push_back(length);
      length_sum += static_cast<double>(length);
      results.max_length = std::max(results.max_length, length);
      ++sequences;
    }
    for (std::size_t k = 0; k < simulated.size(); ++k) {
      const Method& method = simulated[k];
      input.balance = method.balance;
      const bool reference = method.balance == data::Balance::ref_lb_micro || method.balance == data::Balance::ref_lb_mini;
      input.cost = reference ? setup.reference_cost : setup.cost;
      input.reference_split = setup.reference_split;
      // Context parallelism: dynamic groups under ODC, the run's static degree under collectives.
      input.context_dynamic = setup.context_parallel && method.comm == CommKind::odc;
      input.max_context_degree = setup.max_context_degree;
      input.context_degree = setup.context_parallel && method.comm == CommKind::collective ? setup.context_degree : 1;
      const data::Plan plan = data::make_plan(input);
      const auto work = work_from_plan(plan, input.lengths, setup.exchange);
      const UnitBytes& bytes = method.comm == CommKind::odc ? setup.odc_bytes : setup.collective_bytes;
      options.record_intervals = step == 0;
      MinibatchTimeline timeline = simulate_minibatch(work, setup.compute, bytes, setup.link, method.comm, options);
      options.record_intervals = false;
      const auto free_work = setup.context_parallel ? work_from_plan(plan, input.lengths, free_exchange) : work;
      const auto free = simulate_minibatch(free_work, setup.compute, bytes, free_link, method.comm, free_options);
      acc[k].context_groups += static_cast<double>(plan.groups.size());
      accumulate(acc[k], timeline);
      acc[k].free_time += free.total_s();
      // Planned bubbles in the simulated cost model for every method (the reference's plans are made
      // with its own cost, so they are costed again to compare).
      const double own = method.comm == CommKind::odc ? plan.bubble_odc() : plan.bubble_collective();
      const double recosted = reference ? bubble_under(plan, input.lengths, setup.cost, method.comm) : own;
      acc[k].planned += recosted < 0.0 ? own : recosted;
      const double estimate = bubble_under(plan, input.lengths, estimate_cost, method.comm);
      if (estimate < 0.0) acc[k].reference_estimate_missing = true;
      acc[k].reference_estimate += estimate;
      if (step == 0) firsts[k] = std::move(timeline);
    }
  }
  results.mean_length = length_sum / static_cast<double>(sequences);

  const auto baseline_index = static_cast<std::size_t>(
      std::find(simulated.begin(), simulated.end(), setup.baseline) - simulated.begin());
  const Accumulator& base = acc[baseline_index];
  const auto n = static_cast<double>(setup.minibatches);
  for (std::size_t k = 0; k < setup.methods.size(); ++k) {
    const Accumulator& a = acc[k];
    MethodResult r;
    r.method = simulated[k];
    r.minibatch_time_s = a.time / n;
    r.samples_per_s_per_device = r.minibatch_time_s > 0.0 ? static_cast<double>(setup.minibatch_size) / r.minibatch_time_s : 0.0;
    r.speedup = a.time > 0.0 ? base.time / a.time : 1.0;
    r.bubble_simulated = a.barrier_span > 0.0 ? a.idle / a.barrier_span : 0.0;
    r.bubble_planned = a.planned / n;
    r.zero_overhead_bound = a.free_time > 0.0 ? base.free_time / a.free_time : 1.0;
    r.compute_s = a.compute / n;
    r.gather_wait_s = a.gather_wait / n;
    r.push_wait_s = a.push_wait / n;
    r.accumulate_s = a.accumulate / n;
    r.barrier_wait_s = a.barrier_wait / n;
    r.optimizer_s = a.optimizer / n;
    r.microbatches_per_device = a.microbatches / n;
    r.inter_node_bytes = a.inter_node_bytes / n;
    r.refresh_s = a.refresh / n;
    r.replica_sum_s = a.replica_sum / n;
    r.exchange_s = a.exchange / n;
    r.padding_s = a.padding / n;
    r.bubble_reference_estimate = a.reference_estimate_missing ? -1.0 : a.reference_estimate / n;
    r.context_groups = a.context_groups / n;
    r.first = std::move(firsts[k]);
    results.methods.push_back(std::move(r));
  }
  return results;
}

nlohmann::ordered_json method_json(const SimResults& results, const MethodResult& r) {
  const auto& s = results.setup;
  auto rounded = [](double value, int digits) {
    const double scale = std::pow(10.0, digits);
    return std::round(value * scale) / scale;
  };
  return nlohmann::ordered_json{
      {"sim", s.label},
      {"method", r.method.name()},
      {"comm", comm_name(r.method.comm)},
      {"balance", data::balance_name(r.method.balance)},
      {"devices", s.devices},
      {"devices_per_node", s.link.devices_per_node},
      {"sharding", std::string(distributed::sharding_name(s.sharding))},
      {"minibatch_size", s.minibatch_size},
      {"minibatches", s.minibatches},
      {"token_cap", s.token_cap},
      {"mean_length", rounded(results.mean_length, 1)},
      {"minibatch_time_s", rounded(r.minibatch_time_s, 6)},
      {"samples_per_s_per_device", rounded(r.samples_per_s_per_device, 6)},
      {"speedup", rounded(r.speedup, 4)},
      {"bubble_simulated", rounded(r.bubble_simulated, 4)},
      {"bubble_planned", rounded(r.bubble_planned, 4)},
      {"bubble_reference_estimate", r.bubble_reference_estimate < 0.0 ? nlohmann::ordered_json(nullptr)
                                                                       : nlohmann::ordered_json(rounded(r.bubble_reference_estimate, 4))},
      {"zero_overhead_bound", rounded(r.zero_overhead_bound, 4)},
      {"compute_s", rounded(r.compute_s, 6)},
      {"gather_wait_s", rounded(r.gather_wait_s, 6)},
      {"push_wait_s", rounded(r.push_wait_s, 6)},
      {"accumulate_s", rounded(r.accumulate_s, 6)},
      {"barrier_wait_s", rounded(r.barrier_wait_s, 6)},
      {"optimizer_s", rounded(r.optimizer_s, 6)},
      {"microbatches_per_device", rounded(r.microbatches_per_device, 3)},
      {"inter_node_gb", rounded(r.inter_node_bytes / 1e9, 3)},
      {"refresh_s", rounded(r.refresh_s, 6)},
      {"replica_sum_s", rounded(r.replica_sum_s, 6)},
      {"context_parallel", context_text(s, r.method)},
      {"exchange_s", rounded(r.exchange_s, 6)},
      {"padding_s", rounded(r.padding_s, 6)},
      {"collective_model", collective_model_name(s.link.collective)},
      {"collective_padding", s.dummy_padding ? "dummy" : "empty"},
      {"fsdp_root_unit", s.fsdp_root_unit},
      {"context_groups", rounded(r.context_groups, 3)},
      {"baseline", s.baseline.name()},
      {"lengths", s.pool_stats.text()},
      {"length_median", rounded(s.pool_stats.median, 1)},
      {"length_p95", rounded(s.pool_stats.p95, 1)},
      {"length_share_at_max", rounded(s.pool_stats.share_at_longest, 4)},
      {"published_lengths", s.published_lengths},
  };
}

std::string markdown_table(const SimResults& results) {
  const auto& s = results.setup;
  std::string out = fmt::format(
      "### {}: {} layers x hidden {}, {} devices ({} per node), sharding {}, collectives {} ({} padding), {} "
      "seq/device/step, cap {} tokens, mean length {:.0f}, {} minibatches; compute: {}\n\n",
      s.label, s.model.num_hidden_layers, s.model.hidden_size, s.devices, s.link.devices_per_node,
      sharding_text(s), collective_model_name(s.link.collective), s.dummy_padding ? "dummy" : "empty",
      s.minibatch_size, s.token_cap, results.mean_length, s.minibatches, s.compute.description);
  out += "Lengths: " + s.pool.description + ": " + s.pool_stats.text() +
         (s.published_lengths.empty() ? std::string() : "; published: " + s.published_lengths) + ".\n\n";
  if (!s.measured.empty()) out += "Calibration: " + s.measured + ".\n\n";
  if (s.context_parallel) {
    out += fmt::format(
        "Context parallelism: sequences over the cap split over devices, odc methods by dynamic groups (at most {} "
        "devices), collective methods by the static degree {}; keys and values exchanged at {:.0f} B per token "
        "and layer.\n\n",
        s.max_context_degree == 0 ? s.devices : s.max_context_degree, s.context_degree, s.exchange.kv_bytes_per_token);
  }
  out += "| method | minibatch time (s) | samples/s/device | speedup | bubble (simulated) | bubble (planned) | "
         "zero-overhead bound | microbatches/device | inter-node GB |\n";
  out += "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& r : results.methods) {
    out += fmt::format("| {}{} | {:.4f} | {:.4f} | {:.3f} | {:.1f}% | {:.1f}% | {:.3f} | {:.2f} | {:.1f} |\n",
                       r.method.name(), r.method == s.baseline ? " (baseline)" : "", r.minibatch_time_s,
                       r.samples_per_s_per_device, r.speedup, 100.0 * r.bubble_simulated, 100.0 * r.bubble_planned,
                       r.zero_overhead_bound, r.microbatches_per_device, r.inter_node_bytes / 1e9);
  }
  return out;
}

nlohmann::json timelines_json(const SimResults& results) {
  nlohmann::json out = {{"sim", results.setup.label}, {"methods", nlohmann::json::array()}};
  for (const auto& r : results.methods) {
    nlohmann::json devices = nlohmann::json::array();
    for (const auto& device : r.first.devices) {
      nlohmann::json busy = nlohmann::json::array();
      for (const auto& b : device.busy) {
        busy.push_back({b.start, b.end, b.microbatch, b.step.unit, phase_name(b.step.phase)});
      }
      devices.push_back({{"busy", std::move(busy)}, {"compute_s", device.compute_s}, {"finish_s", device.finish_s}});
    }
    out["methods"].push_back({{"method", r.method.name()},
                              {"barrier_s", r.first.barrier_s},
                              {"optimizer_s", r.first.optimizer_s},
                              {"devices", std::move(devices)}});
  }
  return out;
}

}  // namespace odc::sim
