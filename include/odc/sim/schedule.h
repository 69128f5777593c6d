#pragma once
// The two schedules of one global minibatch, simulated step by step.
//
// Every device runs its microbatches in order; a microbatch is the step sequence of
// ComputeModel::steps(). Before a step the device needs its unit's parameters (a gather,
// prefetched one step ahead by default: the gather for step i+1 is issued when step i starts
// computing; gathers run one after another); after a head or backward step it hands the unit's
// gradient off (at most 3 outstanding: issuing a 4th waits for the oldest).
//
//   collective: every device runs max_d M_d microbatches (missing ones are empty: no compute, but
//     they still join every collective; with ScheduleOptions::dummy_padding a one-token microbatch,
//     as FSDP runs). Each gather and each reduction is a collective: it
//     starts when the last device issues it (and the previous one of its kind finished) and
//     completes for everybody at once, so the slowest device of each step sets the pace. With
//     prefetch a device that finished a step early may start the next one as soon as every
//     device *started* the current one, so it can run one step ahead: the per-step barrier of
//     the paper's Eq. 1 (sum over steps of the max over devices) is exact at depth 0 and an
//     upper bound otherwise.
//   odc: each device runs its own microbatches (skipping empty ones) with point-to-point gathers
//     and pushes that involve nobody else; the only synchronization is one barrier at the end,
//     after every device finished computing, its pushes drained and (with an accumulate cost) it
//     added every client's pushed slices into its accumulators. Dynamic context groups
//     (MicrobatchWork::group) run first: a group's members run its steps together, each step
//     starting when the last member can start it and lasting the slowest member's compute plus the
//     exchange; then every device its own microbatches.
// Links: by default a device's gathers and its gradient hand-offs run on independent channels.
// With `shared_link` they queue on one, in issue order: each direction of a device's (and node's)
// links carries both kinds (inbound: its own gathers and its peers' pushes to it; outbound: the
// shards it serves and its own pushes), so concurrent gathers and pushes share the bandwidth
// (a FIFO rather than a fair share: the same total time). The collective's all-gathers and
// reduce-scatters share the ring the same way.
// Sharding layouts (ScheduleOptions::sharding, odc/sim/layout_costs.h) change what each transfer
// costs and who synchronizes: hybrid keeps gathers and hand-offs inside a node (the collective's
// per-step syncs then join only the node's devices: every node runs its own collectives, each
// padded to its own devices' largest count, as the trainer plans a hybrid host) and adds a cross-node gradient
// all-reduce after the barrier; hpz starts the minibatch with a world-wide refresh of the node's
// secondary copy (no compute before it), then gathers inside the node while gradients still go
// world-wide (collective: one sync domain, the nodes' concurrent in-node all-gathers completing
// together: an upper bound).
// Both then run the optimizer step, which takes the same time on every device.
//
// The recurrences are exact for this model (no event queue needed): collectives are resolved in
// step order, which every device shares, and odc devices are independent until the barrier.
#include <cstdint>
#include <vector>

#include "odc/data/planner.h"
#include "odc/sim/compute_model.h"
#include "odc/sim/layout_costs.h"
#include "odc/sim/link_model.h"

namespace odc::sim {

// The work of one microbatch: its token count and causal attention pairs.
struct MicrobatchWork {
  std::int64_t tokens = 0;
  double pairs = 0.0;
  std::int64_t sequences = 0;
  // Context parallelism: a member's share of split sequences (tokens and pairs are the share's).
  // group >= 0: the dynamic context group (data::Plan::groups index) it belongs to; its members'
  // microbatches of that group move in step (every decoder layer waits for the slowest member),
  // and lead each member's work in group order. The exchange's seconds are added to every decoder
  // layer's forward and backward step (dynamic and static degree alike).
  int group = -1;
  double exchange_forward_s = 0.0;
  double exchange_backward_s = 0.0;
};
using DeviceWork = std::vector<MicrobatchWork>;  // one device's microbatches, in execution order

// The per-layer exchange of a split sequence's keys and values between the members of its group:
// each member receives the other members' rows, (k-1)/k of the sequence, in the forward; in the
// backward it returns their gradients (the same bytes) and, under activation checkpointing, the
// recomputed forward gathers them again. Over the intra-node links when the members share a node,
// else over the node's network link shared by its devices (an assumption: members of one group
// chosen on several nodes). Not overlapped with compute (an upper bound: ring attention hides part
// of it behind the blocks already held).
struct ExchangeModel {
  double kv_bytes_per_token = 0.0;  // K and V of one token in one layer: 2 * kv_dim * activation bytes
  bool recompute = true;            // the backward's recomputed forward gathers again
  LinkModel link;
  // Seconds of one layer's exchange of these sequences over `ranks` (latency once per exchange; 0
  // for one rank or free links' latency).
  double forward_s(double bytes, const std::vector<int>& ranks) const;
  double backward_s(double bytes, const std::vector<int>& ranks) const;
  // The bytes a member receives of one sequence per layer and pass: (k-1)/k of its K/V rows.
  double bytes_of(std::int64_t length, int k) const;
};

// Microbatch work of every device from a plan over `lengths` (the PlanInput's lengths): each
// rank's context groups first (dynamic), then its microbatches; under a static context degree
// every microbatch is the member's share of each of its sequences.
std::vector<DeviceWork> work_from_plan(const data::Plan& plan, const std::vector<std::int64_t>& lengths,
                                       const ExchangeModel& exchange = {});
// s(s+1)/2: the (query, key <= query) pairs of one causal sequence.
double causal_pairs(std::int64_t length);

// A span during which a device computes one step.
struct BusyInterval {
  double start = 0.0;
  double end = 0.0;
  int microbatch = 0;
  Step step;
};

struct DeviceTimeline {
  std::vector<BusyInterval> busy;  // in time order (only when recorded)
  double compute_s = 0.0;          // sum of step compute times
  double gather_wait_s = 0.0;      // waiting for parameters that had not arrived
  double push_wait_s = 0.0;        // waiting for a gradient hand-off slot
  double accumulate_s = 0.0;       // odc: adding the clients' pushed slices (owner side)
  double exchange_s = 0.0;         // context parallelism: exchanges, and waits for the group's members
  double padding_s = 0.0;          // collective with dummy padding: running dummy microbatches (idle in bubble())
  double finish_s = 0.0;           // last compute done and own gradients delivered
  int microbatches = 0;            // run (odc: non-empty ones; collective: padded count)
};

struct MinibatchTimeline {
  CommKind comm = CommKind::odc;
  std::vector<DeviceTimeline> devices;
  double barrier_s = 0.0;    // every device passed the end-of-minibatch barrier (hybrid: and the replica sum)
  double refresh_s = 0.0;    // hpz: the secondary copy's refresh before any compute (part of barrier_s)
  double replica_sum_s = 0.0;  // hybrid: the cross-node gradient all-reduce, once (part of barrier_s)
  double inter_node_bytes = 0.0;  // bytes that crossed node boundaries, all devices and transfers
  double optimizer_s = 0.0;  // then the optimizer step
  double total_s() const { return barrier_s + optimizer_s; }
  // Idle fraction before the optimizer: sum_d (barrier - compute_d) / (D * barrier). The
  // optimizer step keeps every device busy for the same time and is left out, like the planner's
  // estimate (data::Plan::bubble_*), which this is compared with.
  double bubble() const;
  double barrier_wait_s(std::size_t device) const { return barrier_s - devices.at(device).finish_s; }
};

struct ScheduleOptions {
  int prefetch_depth = 1;              // gathers issued this many steps ahead (0: no overlap)
  int max_outstanding_reductions = 3;  // gradient hand-offs in flight per device
  bool record_intervals = true;        // keep per-step BusyIntervals (plots, tests)
  // Every compute step of the Collective schedule takes this many times its modeled time. Measured
  // on the CPU trainer (bench/e2e.py: the same microbatches traced under both comms): a rank that
  // waits inside an MPI collective busy-polls, and that slows the rank still computing next to it
  // (shared cores, caches and memory bandwidth); ODC ranks wait only at the minibatch's end.
  double collective_compute_factor = 1.0;
  // Gathers and gradient hand-offs of a device queue on one channel (see above).
  bool shared_link = false;
  // ODC owner-side accumulation: seconds per byte of gradient an owner receives (a push of unit u
  // delivers bytes.reduce[u] / D to every owner, itself included; hybrid: / devices_per_node to
  // the owners of its node). 0 = free.
  double accumulate_seconds_per_byte = 0.0;
  // Where the shards live (full: over every device; see odc/sim/layout_costs.h).
  Sharding sharding = Sharding::full;
  // Collective: what a device runs for a microbatch it does not have (it still joins every
  // collective of that step). false: nothing (the trainer's collective comm calls the collectives
  // without running the model); true: a one-token microbatch, as FSDP must run (its all-gathers and
  // reduce-scatters are issued by the module's forward and backward hooks), which costs the
  // per-step fixed costs (the fit's c).
  bool dummy_padding = false;
  // FSDP's wrapping: each decoder layer its own unit, the embedding and the head (final norm, LM
  // head) one root unit, gathered at the embedding's forward and kept until the embedding's backward
  // ends, its gradient handed off once then (LayoutCosts::root_unit). For both comms: the reference's
  // ODC runs inside the same FSDP wrapping.
  bool fsdp_root_unit = false;
};

MinibatchTimeline simulate_minibatch(const std::vector<DeviceWork>& work, const ComputeModel& compute,
                                     const UnitBytes& bytes, const LinkModel& link, CommKind comm,
                                     const ScheduleOptions& options = {});

}  // namespace odc::sim
