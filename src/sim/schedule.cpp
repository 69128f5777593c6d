#include "odc/sim/schedule.h"

#include <algorithm>
#include <cstddef>
#include <deque>
#include <utility>
#include <vector>

#include "odc/core/error.h"

namespace odc::sim {

double causal_pairs(std::int64_t length) {
  const auto s = static_cast<double>(length);
  return s * (s + 1.0) / 2.0;
}

double MinibatchTimeline::bubble() const {
  if (devices.empty() || barrier_s <= 0.0) return 0.0;
  double idle = 0.0;
  for (const auto& device : devices) idle += barrier_s - device.compute_s;
  return idle / (static_cast<double>(devices.size()) * barrier_s);
}

namespace {

// One device's state while its steps are replayed.
struct DeviceState {
  double ready = 0.0;               // the device may start its next step (compute done, hand-off issued)
  double last_start = 0.0;          // compute start of the latest step (the prefetch issued with it)
  std::deque<double> outstanding;   // completion times of gradient hand-offs in flight
  double last_push_done = 0.0;      // the latest gradient hand-off completion
};

// Runs one step's compute once its parameters are there; returns the compute start.
// `exchange`: a context-parallel step's exchange after its compute (0 otherwise); `padding`: a dummy
// microbatch's step, busy but not useful work (DeviceTimeline::padding_s, not compute_s).
void compute_step(DeviceState& state, DeviceTimeline& timeline, double params_ready, double seconds, int microbatch,
                  const Step& step, bool record, double exchange = 0.0, bool padding = false) {
  const double start = std::max(state.ready, params_ready);
  timeline.gather_wait_s += start - state.ready;
  const double end = start + seconds;
  (padding ? timeline.padding_s : timeline.compute_s) += seconds;
  timeline.exchange_s += exchange;
  if (record && seconds > 0.0) timeline.busy.push_back({start, end, microbatch, step});
  state.last_start = start;
  state.ready = end + exchange;
}

// Waits, if needed, until fewer than `limit` hand-offs are in flight; returns the issue time.
double reserve_hand_off(DeviceState& state, DeviceTimeline& timeline, int limit) {
  while (!state.outstanding.empty() && state.outstanding.front() <= state.ready) state.outstanding.pop_front();
  if (static_cast<int>(state.outstanding.size()) >= limit) {
    const double freed = state.outstanding.front();
    state.outstanding.pop_front();
    timeline.push_wait_s += freed - state.ready;
    state.ready = freed;
  }
  return state.ready;
}

// A link a device's transfers queue on: with ScheduleOptions::shared_link gathers and gradient
// hand-offs use one (each direction of a device's links carries both kinds: its own pulls in and
// its owners' serving out, its pushes out and its peers' pushes in), otherwise one each.
struct Channels {
  bool shared = false;
  double gather_free = 0.0;
  double push_free = 0.0;
  double& gather() { return gather_free; }
  double& push() { return shared ? gather_free : push_free; }
  // Reserves `seconds` on `channel` from `issue` on; returns the completion time.
  static double reserve(double& channel, double issue, double seconds) {
    channel = std::max(issue, channel) + seconds;
    return channel;
  }
};

// The steps of a device's microbatches in execution order, flattened across microbatches.
struct FlatStep {
  int microbatch = 0;
  Step step;
  std::int64_t tokens = 0;
  double pairs = 0.0;
  double exchange = 0.0;  // context parallelism: the step's exchange (decoder layers only)
  int group = -1;         // MicrobatchWork::group
};

// The exchange of a step of `work`: decoder layers (units 1..L) in forward and backward.
double step_exchange(const MicrobatchWork& work, const Step& step, int decoder_layers) {
  if (step.unit < 1 || step.unit > decoder_layers) return 0.0;
  if (step.phase == Phase::forward) return work.exchange_forward_s;
  if (step.phase == Phase::backward) return work.exchange_backward_s;
  return 0.0;
}

std::vector<FlatStep> flatten(const DeviceWork& work, const std::vector<Step>& steps, bool skip_empty,
                              int decoder_layers) {
  std::vector<FlatStep> out;
  out.reserve(work.size() * steps.size());
  int index = 0;
  for (const auto& microbatch : work) {
    if (skip_empty && microbatch.tokens <= 0) continue;
    for (const auto& step : steps) {
      out.push_back({index, step, microbatch.tokens, microbatch.pairs, step_exchange(microbatch, step, decoder_layers),
                     microbatch.group});
    }
    ++index;
  }
  return out;
}

// Every owner adds every client's pushed slices into its accumulator (ODC's owner-side cost): the
// jobs arrive at the clients' push completions; those arriving while the owner computes delay it
// by their length (an add kernel competes with compute for the device), later ones run in its idle
// time, in arrival order. `jobs` is sorted by arrival and `prefix[i]` sums the first i durations.
// Returns the owner's finish time.
double finish_with_accumulation(double finish, const std::vector<std::pair<double, double>>& jobs,
                                const std::vector<double>& prefix) {
  const auto first_later = static_cast<std::size_t>(
      std::upper_bound(jobs.begin(), jobs.end(), finish,
                       [](double t, const std::pair<double, double>& job) { return t < job.first; }) -
      jobs.begin());
  double t = finish + prefix[first_later];
  for (std::size_t k = first_later; k < jobs.size(); ++k) t = std::max(t, jobs[k].first) + jobs[k].second;
  return t;
}

// Accumulation jobs (arrival, seconds) of one group of owners, sorted, with their prefix sums.
struct OwnerJobs {
  std::vector<std::pair<double, double>> jobs;
  std::vector<double> prefix;
  void finalize() {
    std::sort(jobs.begin(), jobs.end());
    prefix.assign(jobs.size() + 1, 0.0);
    for (std::size_t k = 0; k < jobs.size(); ++k) prefix[k + 1] = prefix[k] + jobs[k].second;
  }
};

// Devices that share one copy of the shards (hybrid: a node's; full, hpz: all of them).
std::size_t shard_group(const LayoutCosts& costs, std::size_t devices, const LinkModel& link) {
  if (costs.sharding == Sharding::full) return devices;
  if (devices != static_cast<std::size_t>(link.devices)) {
    fail("simulate_minibatch: sharding {} on a link of {} devices, but {} devices have work",
         distributed::sharding_name(costs.sharding), link.devices, devices);
  }
  return static_cast<std::size_t>(costs.shard_group);
}

MinibatchTimeline simulate_odc(const std::vector<DeviceWork>& work, const ComputeModel& compute,
                               const UnitBytes& bytes, const LinkModel& link, const ScheduleOptions& options) {
  MinibatchTimeline out;
  out.comm = CommKind::odc;
  const auto steps = compute.steps();
  const int depth = options.prefetch_depth;
  const LayoutCosts costs = layout_costs(bytes, link, CommKind::odc, options.sharding, options.fsdp_root_unit);
  const std::size_t group = shard_group(costs, work.size(), link);
  // Every owner of a device's shard group receives a slice of each of its pushes.
  const auto owners = static_cast<double>(group);
  std::vector<OwnerJobs> accumulations(work.size() / group);
  // hpz: the refresh of the node's copy comes first (devices without work take part too).
  const double start = costs.refresh_s;
  out.refresh_s = costs.refresh_s;
  // Reserves the gather of `step` on `dev`'s channel from `issued`; returns when its parameters are
  // there (at once when the step gathers nothing: FSDP's root unit is still gathered).
  auto gather = [&](auto& dev, const Step& step, double issued) {
    const auto transfer = costs.gather_of(step);
    if (!transfer.happens) return 0.0;
    dev.inter += transfer.inter_bytes;
    return Channels::reserve(dev.channels.gather(), issued, transfer.seconds);
  };
  const int decoder_layers = static_cast<int>(compute.forward.size()) - 1;
  // Every device's replay state: devices are independent except in their context groups' steps.
  struct Device {
    DeviceState state;
    DeviceTimeline timeline;
    Channels channels;
    std::vector<FlatStep> flat;
    std::vector<double> params_ready;
    double inter = 0.0;
    std::size_t next = 0;  // the next flat step to run
  };
  std::vector<Device> devices(work.size());
  for (std::size_t d = 0; d < work.size(); ++d) {
    Device& dev = devices[d];
    dev.state.ready = start;
    dev.channels = Channels{options.shared_link, start, start};
    dev.flat = flatten(work[d], steps, true, decoder_layers);
    dev.inter = costs.refresh_inter_bytes;
    dev.params_ready.assign(dev.flat.size(), 0.0);
    // The first `depth` gathers are issued at the start, one after another.
    for (std::size_t j = 0; j < dev.flat.size() && static_cast<int>(j) < depth; ++j) {
      dev.params_ready[j] = gather(dev, dev.flat[j].step, start);
    }
  }
  // Before step j computes: with depth 0 its gather is issued now.
  auto prepare = [&](Device& dev, std::size_t j) {
    if (depth != 0) return;
    dev.params_ready[j] = gather(dev, dev.flat[j].step, dev.state.ready);
  };
  // After step j computed (started at state.last_start): the prefetch and the gradient hand-off.
  auto finish_step = [&](Device& dev, std::size_t d, std::size_t j) {
    const auto& item = dev.flat[j];
    // Issued when this step starts: the gather `depth` steps ahead (before this step's hand-off,
    // which is issued later, when it ends).
    if (depth > 0 && j + static_cast<std::size_t>(depth) < dev.flat.size()) {
      const auto ahead = j + static_cast<std::size_t>(depth);
      dev.params_ready[ahead] = gather(dev, dev.flat[ahead].step, dev.state.last_start);
    }
    const auto hand_off = costs.hand_off_of(item.step);
    if (!hand_off.happens) return;
    const double issue = reserve_hand_off(dev.state, dev.timeline, options.max_outstanding_reductions);
    const double done = Channels::reserve(dev.channels.push(), issue, hand_off.seconds);
    dev.inter += hand_off.inter_bytes;
    dev.state.outstanding.push_back(done);
    dev.state.last_push_done = std::max(dev.state.last_push_done, done);
    if (options.accumulate_seconds_per_byte > 0.0) {
      accumulations[d / group].jobs.emplace_back(done, hand_off.bytes / owners * options.accumulate_seconds_per_byte);
    }
  };
  // Dynamic context groups first, in group order: a group's members run each step together.
  int groups = 0;
  for (const auto& device : work) {
    for (const auto& mb : device) groups = std::max(groups, mb.group + 1);
  }
  for (int g = 0; g < groups; ++g) {
    std::vector<std::size_t> members;
    for (std::size_t d = 0; d < work.size(); ++d) {
      const Device& dev = devices[d];
      if (dev.next < dev.flat.size() && dev.flat[dev.next].group == g) members.push_back(d);
    }
    if (members.empty()) fail("simulate_minibatch: context group {} leads no device's remaining work", g);
    for (std::size_t s = 0; s < steps.size(); ++s) {
      double together = 0.0;  // the step starts when every member can start it
      double slowest = 0.0;   // and lasts the slowest member's compute plus the exchange
      double exchange = 0.0;
      for (const std::size_t d : members) {
        Device& dev = devices[d];
        const auto& item = dev.flat[dev.next];
        if (item.group != g) fail("simulate_minibatch: context group {} has members with different steps", g);
        prepare(dev, dev.next);
        together = std::max(together, std::max(dev.state.ready, dev.params_ready[dev.next]));
        slowest = std::max(slowest, compute.time(item.step, item.tokens, item.pairs));
        exchange = std::max(exchange, item.exchange);
      }
      for (const std::size_t d : members) {
        Device& dev = devices[d];
        const auto& item = dev.flat[dev.next];
        const double own = std::max(dev.state.ready, dev.params_ready[dev.next]);
        const double seconds = compute.time(item.step, item.tokens, item.pairs);
        dev.timeline.gather_wait_s += own - dev.state.ready;
        dev.timeline.exchange_s += (together - own) + (slowest - seconds) + exchange;
        dev.timeline.compute_s += seconds;
        if (options.record_intervals && seconds > 0.0) {
          dev.timeline.busy.push_back({together, together + seconds, item.microbatch, item.step});
        }
        dev.state.last_start = together;
        dev.state.ready = together + slowest + exchange;
        finish_step(dev, d, dev.next);
        ++dev.next;
      }
    }
  }
  for (std::size_t d = 0; d < work.size(); ++d) {
    Device& dev = devices[d];
    for (std::size_t j = dev.next; j < dev.flat.size(); ++j) {
      const auto& item = dev.flat[j];
      if (item.group >= 0) fail("simulate_minibatch: device {} runs context group {} after its own work", d, item.group);
      prepare(dev, j);
      compute_step(dev.state, dev.timeline, dev.params_ready[j], compute.time(item.step, item.tokens, item.pairs),
                   item.microbatch, item.step, options.record_intervals, item.exchange);
      finish_step(dev, d, j);
    }
    dev.timeline.microbatches = dev.flat.empty() ? 0 : dev.flat.back().microbatch + 1;
    dev.timeline.finish_s = std::max(dev.state.ready, dev.state.last_push_done);
    out.inter_node_bytes += dev.inter;
    out.devices.push_back(std::move(dev.timeline));
  }
  for (auto& jobs : accumulations) jobs.finalize();
  double slowest = 0.0;
  for (std::size_t d = 0; d < out.devices.size(); ++d) {
    auto& timeline = out.devices[d];
    const OwnerJobs& mine = accumulations[d / group];
    if (!mine.jobs.empty()) {
      timeline.finish_s = finish_with_accumulation(timeline.finish_s, mine.jobs, mine.prefix);
      timeline.accumulate_s = mine.prefix.back();
    }
    slowest = std::max(slowest, timeline.finish_s);
  }
  // hybrid: every device's share of the gradients is summed across the nodes after the barrier.
  out.replica_sum_s = costs.replica_sum_s;
  out.inter_node_bytes += costs.replica_sum_inter_bytes;
  out.barrier_s = slowest + (work.size() > 1 ? link.latency : 0.0) + costs.replica_sum_s;
  out.optimizer_s = compute.optimizer_s;
  return out;
}

// The collectives of one sync domain: devices [first, first + count) of `out`, each running
// `padded` microbatches (the world's maximum: missing ones are empty). Fills their timelines.
void collective_domain(const std::vector<DeviceWork>& work, std::size_t first, std::size_t count,
                       std::size_t padded, const ComputeModel& compute, const LayoutCosts& costs,
                       const ScheduleOptions& options, MinibatchTimeline& out) {
  const double start = costs.refresh_s;
  std::vector<DeviceState> states(count);
  for (auto& state : states) state.ready = start;
  const auto steps = compute.steps();
  const int depth = options.prefetch_depth;
  // Every device runs the padded count: the step sequence of microbatch m is the same everywhere.
  DeviceWork padded_work(padded);
  const auto flat = flatten(padded_work, steps, false, 0);
  const int decoder_layers = static_cast<int>(compute.forward.size()) - 1;
  // A device without microbatch m runs nothing, or (FSDP) a one-token dummy to join the collectives.
  MicrobatchWork empty;
  if (options.dummy_padding) empty = {.tokens = 1, .pairs = 1.0, .sequences = 1};
  // All-gathers run one after another on the ring, and so do reductions (on the same ring with a
  // shared link). A collective starts once the last device issued it.
  Channels ring{options.shared_link, start, start};
  out.inter_node_bytes += costs.refresh_inter_bytes;
  auto all_gather = [&](std::size_t j, double issued) {
    const auto transfer = costs.gather_of(flat[j].step);
    if (!transfer.happens) return 0.0;  // FSDP's root unit, still gathered
    out.inter_node_bytes += transfer.inter_bytes;
    return Channels::reserve(ring.gather(), issued, transfer.seconds);
  };
  std::vector<double> params_ready(flat.size(), 0.0);
  for (std::size_t j = 0; j < flat.size() && static_cast<int>(j) < depth; ++j) params_ready[j] = all_gather(j, start);
  for (std::size_t j = 0; j < flat.size(); ++j) {
    const auto& item = flat[j];
    const auto m = static_cast<std::size_t>(item.microbatch);
    if (depth == 0) {
      double issued = 0.0;
      for (const auto& state : states) issued = std::max(issued, state.ready);
      params_ready[j] = all_gather(j, issued);
    }
    for (std::size_t d = 0; d < count; ++d) {
      const auto& mine = work[first + d];
      const bool padding = m >= mine.size();
      const auto& mb = padding ? empty : mine[m];
      compute_step(states[d], out.devices[first + d], params_ready[j],
                   compute.time(item.step, mb.tokens, mb.pairs) * options.collective_compute_factor, item.microbatch,
                   item.step, options.record_intervals, step_exchange(mb, item.step, decoder_layers), padding);
    }
    if (depth > 0 && j + static_cast<std::size_t>(depth) < flat.size()) {
      double issued = 0.0;
      for (const auto& state : states) issued = std::max(issued, state.last_start);
      params_ready[j + static_cast<std::size_t>(depth)] = all_gather(j + static_cast<std::size_t>(depth), issued);
    }
    const auto hand_off = costs.hand_off_of(item.step);
    if (!hand_off.happens) continue;
    double all_issued = 0.0;
    for (std::size_t d = 0; d < count; ++d) {
      all_issued =
          std::max(all_issued, reserve_hand_off(states[d], out.devices[first + d], options.max_outstanding_reductions));
    }
    const double done = Channels::reserve(ring.push(), all_issued, hand_off.seconds);
    out.inter_node_bytes += hand_off.inter_bytes;
    for (auto& state : states) {
      state.outstanding.push_back(done);
      state.last_push_done = std::max(state.last_push_done, done);
    }
  }
  for (std::size_t d = 0; d < count; ++d) {
    out.devices[first + d].microbatches = static_cast<int>(padded);
    out.devices[first + d].finish_s = std::max(states[d].ready, states[d].last_push_done);
  }
}

MinibatchTimeline simulate_collective(const std::vector<DeviceWork>& work, const ComputeModel& compute,
                                      const UnitBytes& bytes, const LinkModel& link,
                                      const ScheduleOptions& options) {
  MinibatchTimeline out;
  out.comm = CommKind::collective;
  const auto devices = work.size();
  out.devices.resize(devices);
  const LayoutCosts costs = layout_costs(bytes, link, CommKind::collective, options.sharding, options.fsdp_root_unit);
  // hybrid: every node's collectives involve only its devices; full and hpz: one domain (hpz's
  // world-wide reduce-scatters join every device at each backward step anyway).
  const std::size_t domain = costs.sharding == Sharding::hybrid ? shard_group(costs, devices, link) : devices;
  for (std::size_t first = 0; first < devices; first += domain) {
    // A domain pads to its own largest count (the trainer pads a hybrid host to its ranks' most).
    std::size_t most = 0;
    for (std::size_t d = first; d < std::min(devices, first + domain); ++d) most = std::max(most, work[d].size());
    collective_domain(work, first, domain, most, compute, costs, options, out);
  }
  double slowest = 0.0;
  for (const auto& device : out.devices) slowest = std::max(slowest, device.finish_s);
  out.refresh_s = costs.refresh_s;
  out.replica_sum_s = costs.replica_sum_s;
  out.inter_node_bytes += costs.replica_sum_inter_bytes;
  out.barrier_s = slowest + (devices > 1 ? link.latency : 0.0) + costs.replica_sum_s;
  out.optimizer_s = compute.optimizer_s;
  return out;
}

}  // namespace

MinibatchTimeline simulate_minibatch(const std::vector<DeviceWork>& work, const ComputeModel& compute,
                                     const UnitBytes& bytes, const LinkModel& link, CommKind comm,
                                     const ScheduleOptions& options) {
  if (work.empty()) fail("simulate_minibatch: no devices");
  if (options.prefetch_depth < 0) fail("simulate_minibatch: prefetch_depth must be >= 0, got {}", options.prefetch_depth);
  if (options.max_outstanding_reductions < 1) {
    fail("simulate_minibatch: max_outstanding_reductions must be >= 1, got {}", options.max_outstanding_reductions);
  }
  if (!(options.collective_compute_factor > 0.0)) {
    fail("simulate_minibatch: collective_compute_factor must be > 0, got {}", options.collective_compute_factor);
  }
  const auto units = static_cast<std::size_t>(compute.num_units());
  if (bytes.gather.size() != units || bytes.reduce.size() != units) {
    fail("simulate_minibatch: the compute model has {} units but the byte counts cover {} / {}", units,
         bytes.gather.size(), bytes.reduce.size());
  }
  return comm == CommKind::odc ? simulate_odc(work, compute, bytes, link, options)
                               : simulate_collective(work, compute, bytes, link, options);
}

}  // namespace odc::sim
