#include "odc/sim/schedule.h"

#include <algorithm>
#include <cstddef>
#include <deque>
#include <vector>

#include "odc/core/error.h"

namespace odc::sim {

double causal_pairs(std::int64_t length) {
  const auto s = static_cast<double>(length);
  return s * (s + 1.0) / 2.0;
}

std::vector<DeviceWork> work_from_plan(const data::Plan& plan, const std::vector<std::int64_t>& lengths) {
  std::vector<DeviceWork> out;
  out.reserve(plan.ranks.size());
  for (const auto& rank : plan.ranks) {
    DeviceWork device;
    for (const auto& microbatch : rank.microbatches) {
      MicrobatchWork work;
      for (const auto index : microbatch) {
        if (index < 0 || static_cast<std::size_t>(index) >= lengths.size()) {
          fail("plan refers to sequence {} of a minibatch of {}", index, lengths.size());
        }
        const auto length = lengths[static_cast<std::size_t>(index)];
        work.tokens += length;
        work.pairs += causal_pairs(length);
        ++work.sequences;
      }
      device.push_back(work);
    }
    out.push_back(std::move(device));
  }
  return out;
}

double MinibatchTimeline::bubble() const {
  if (devices.empty() || barrier_s <= 0.0) return 0.0;
  double idle = 0.0;
  for (const auto& device : devices) idle += barrier_s - device.compute_s;
  return idle / (static_cast<double>(devices.size()) * barrier_s);
}

namespace {

bool hands_off_gradient(const Step& step) { return step.phase != Phase::forward; }

// One device's state while its steps are replayed.
struct DeviceState {
  double ready = 0.0;               // the device may start its next step (compute done, hand-off issued)
  std::vector<double> starts;       // compute start of every step so far (prefetches key off them)
  std::deque<double> outstanding;   // completion times of gradient hand-offs in flight
  double push_channel_free = 0.0;   // odc: the device's own push channel
  double gather_channel_free = 0.0;  // odc: the device's own gather channel

  // When the gather for the next step is issued: with prefetch depth k, when the step k before it
  // started computing (the minibatch's first k gathers at time 0); with depth 0, when the device
  // is ready for the step (no overlap).
  double next_gather_issue(int depth) const {
    if (depth == 0) return ready;
    const auto index = static_cast<std::ptrdiff_t>(starts.size()) - depth;
    return index >= 0 ? starts[static_cast<std::size_t>(index)] : 0.0;
  }
};

// Runs one step's compute once its parameters are there; returns the compute start.
void compute_step(DeviceState& state, DeviceTimeline& timeline, double params_ready, double seconds, int microbatch,
                  const Step& step, bool record) {
  const double start = std::max(state.ready, params_ready);
  timeline.gather_wait_s += start - state.ready;
  const double end = start + seconds;
  timeline.compute_s += seconds;
  if (record && seconds > 0.0) timeline.busy.push_back({start, end, microbatch, step});
  state.starts.push_back(start);
  state.ready = end;
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

MinibatchTimeline simulate_odc(const std::vector<DeviceWork>& work, const ComputeModel& compute,
                               const UnitBytes& bytes, const LinkModel& link, const ScheduleOptions& options) {
  MinibatchTimeline out;
  out.comm = CommKind::odc;
  const auto steps = compute.steps();
  double slowest = 0.0;
  for (const auto& device_work : work) {
    DeviceState state;
    DeviceTimeline timeline;
    int index = 0;
    for (const auto& microbatch : device_work) {
      if (microbatch.tokens <= 0) continue;  // an empty microbatch is simply not run
      for (const auto& step : steps) {
        // The device's gathers run one after another on its inbound channel.
        const double gather_start = std::max(state.next_gather_issue(options.prefetch_depth), state.gather_channel_free);
        const double params_ready =
            gather_start + link.transfer_time(CommKind::odc, bytes.gather.at(static_cast<std::size_t>(step.unit)));
        state.gather_channel_free = params_ready;
        compute_step(state, timeline, params_ready, compute.time(step, microbatch.tokens, microbatch.pairs), index,
                     step, options.record_intervals);
        if (!hands_off_gradient(step)) continue;
        const double issue = reserve_hand_off(state, timeline, options.max_outstanding_reductions);
        const double push_start = std::max(issue, state.push_channel_free);
        state.push_channel_free =
            push_start + link.transfer_time(CommKind::odc, bytes.reduce.at(static_cast<std::size_t>(step.unit)));
        state.outstanding.push_back(state.push_channel_free);
      }
      ++index;
    }
    timeline.microbatches = index;
    timeline.finish_s = std::max(state.ready, state.push_channel_free);
    slowest = std::max(slowest, timeline.finish_s);
    out.devices.push_back(std::move(timeline));
  }
  out.barrier_s = slowest + (work.size() > 1 ? link.latency : 0.0);
  out.optimizer_s = compute.optimizer_s;
  return out;
}

MinibatchTimeline simulate_collective(const std::vector<DeviceWork>& work, const ComputeModel& compute,
                                      const UnitBytes& bytes, const LinkModel& link,
                                      const ScheduleOptions& options) {
  MinibatchTimeline out;
  out.comm = CommKind::collective;
  const auto devices = work.size();
  std::size_t microbatches = 0;
  for (const auto& device_work : work) microbatches = std::max(microbatches, device_work.size());
  std::vector<DeviceState> states(devices);
  out.devices.resize(devices);
  const auto steps = compute.steps();
  const MicrobatchWork empty;
  double reduction_free = 0.0;  // reductions run one after another on the shared ring
  double gather_free = 0.0;     // and so do all-gathers
  for (std::size_t m = 0; m < microbatches; ++m) {
    for (const auto& step : steps) {
      // The all-gather starts once the last device issued it (and the previous one finished).
      double issued = gather_free;
      for (auto& state : states) issued = std::max(issued, state.next_gather_issue(options.prefetch_depth));
      const double params_ready =
          issued + link.transfer_time(CommKind::collective, bytes.gather.at(static_cast<std::size_t>(step.unit)));
      gather_free = params_ready;
      for (std::size_t d = 0; d < devices; ++d) {
        const auto& mb = m < work[d].size() ? work[d][m] : empty;
        compute_step(states[d], out.devices[d], params_ready,
                     compute.time(step, mb.tokens, mb.pairs) * options.collective_compute_factor, static_cast<int>(m),
                     step, options.record_intervals);
      }
      if (!hands_off_gradient(step)) continue;
      double all_issued = reduction_free;
      for (std::size_t d = 0; d < devices; ++d) {
        all_issued = std::max(all_issued, reserve_hand_off(states[d], out.devices[d], options.max_outstanding_reductions));
      }
      reduction_free =
          all_issued + link.transfer_time(CommKind::collective, bytes.reduce.at(static_cast<std::size_t>(step.unit)));
      for (auto& state : states) state.outstanding.push_back(reduction_free);
    }
  }
  double slowest = 0.0;
  for (std::size_t d = 0; d < devices; ++d) {
    out.devices[d].microbatches = static_cast<int>(microbatches);
    out.devices[d].finish_s = std::max(states[d].ready, reduction_free);
    slowest = std::max(slowest, out.devices[d].finish_s);
  }
  out.barrier_s = slowest + (devices > 1 ? link.latency : 0.0);
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
