#pragma once
// What one unit's gathers and gradient hand-offs cost under a sharding layout (sim.sharding, the
// trainer's train.sharding: odc/distributed/shard/sharding.h), and what the layout adds once per minibatch.
//
//   full    shards over all D devices: every gather and hand-off is world-wide (LinkModel as is).
//   hybrid  shards over the L = devices_per_node devices of a node, replicated over the H = D / L
//           nodes: gathers and hand-offs stay in the node (intra-node links only); after the
//           end-of-minibatch barrier each device all-reduces its 1/L share of the gradients with the
//           devices of the same local index on the other nodes (a ring over H nodes per index, the
//           L rings sharing each node's network link), once per minibatch.
//   hpz     primary shards over all devices (as full), plus a secondary copy sharded inside each
//           node: at the minibatch start every device gathers every unit world-wide once (the
//           trainer's refresh, in unit order, then a barrier of the node), after which every gather
//           of the minibatch is served inside the node; hand-offs go to the world-wide owners.
//
// On one node (D <= devices_per_node) every layout costs what full costs: hybrid's node link is
// the world's and it has no replica to sum with; hpz has nothing to refresh (the trainer falls back
// to full there).
#include <vector>

#include "odc/distributed/shard/sharding.h"
#include "odc/sim/compute_model.h"
#include "odc/sim/link_model.h"

namespace odc::sim {

using distributed::Sharding;

struct LayoutCosts {
  Sharding sharding = Sharding::full;
  // Devices one copy of the shards spans (the owners of a device's gathers and hand-offs): hybrid:
  // a node's; else all. ODC owners add slices of bytes.reduce[u] / shard_group.
  int shard_group = 1;
  std::vector<double> gather;  // seconds per gather of unit u (hpz: from the node's secondary copy)
  std::vector<double> reduce;  // seconds per gradient hand-off of unit u
  std::vector<double> reduce_bytes;  // gradient bytes of unit u (UnitBytes::reduce)
  // Bytes crossing node boundaries per operation (LinkModel::inter_node_bytes: odc one device's,
  // collective the whole group's).
  std::vector<double> gather_inter_bytes;
  std::vector<double> reduce_inter_bytes;
  double refresh_s = 0.0;             // hpz: the minibatch-start world-wide gathers of every unit
  double refresh_inter_bytes = 0.0;   // of one device (odc) or of the group (collective)
  double replica_sum_s = 0.0;         // hybrid: the cross-node gradient all-reduce, once per minibatch
  double replica_sum_inter_bytes = 0.0;  // all devices together
  // FSDP's root unit (layout_costs' root_unit): the embedding and the head wrapped as one unit,
  // gathered at the embedding's forward, kept through the head and the embedding's backward, and
  // handed off once, after the embedding's backward.
  bool root_unit = false;
  double root_gather = 0.0, root_reduce = 0.0, root_gather_inter_bytes = 0.0, root_reduce_inter_bytes = 0.0;
  double root_reduce_bytes = 0.0;

  // What one step moves: its unit's gather before it, its gradient hand-off after it.
  struct Transfer {
    bool happens = false;
    double seconds = 0.0;
    double inter_bytes = 0.0;
    double bytes = 0.0;  // hand-offs: the gradient bytes (the owners' accumulation)
  };
  Transfer gather_of(const Step& step) const;
  Transfer hand_off_of(const Step& step) const;
};

// The costs of `comm` under `sharding` on `link`. odc::Error when hybrid or hpz spans nodes that
// do not hold devices_per_node devices each.
// `root_unit`: FSDP's wrapping, the embedding and head as one root unit (LayoutCosts::root_unit).
LayoutCosts layout_costs(const UnitBytes& bytes, const LinkModel& link, CommKind comm, Sharding sharding,
                         bool root_unit = false);

// The ring all-reduce of hybrid: every device sums `shard_bytes` with its peers of the same local
// index on the other nodes, the node's devices at once: latency + 2 * shard * (H-1)/H over the
// per-device share of the node's link (or the device's own link if that is slower); with the nccl
// collective model NCCL's all-reduce over one rank per node at that share. 0 on one node.
double replica_all_reduce_time(const LinkModel& link, double shard_bytes);

}  // namespace odc::sim
