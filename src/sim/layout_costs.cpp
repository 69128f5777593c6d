#include "odc/sim/layout_costs.h"

#include <algorithm>
#include <cstddef>

#include "odc/core/error.h"

namespace odc::sim {

namespace {

// The link of one node's devices alone: what gathers and hand-offs inside a node see.
LinkModel node_link(const LinkModel& world) {
  LinkModel node = world;
  node.devices = std::min(world.devices, world.devices_per_node);
  return node;
}

}  // namespace

double replica_all_reduce_time(const LinkModel& link, double shard_bytes) {
  if (!link.spans_nodes() || shard_bytes <= 0.0) return 0.0;
  if (link.intra_bandwidth <= 0.0 && link.inter_bandwidth <= 0.0) return link.latency;  // free links
  const double nodes = static_cast<double>(link.devices) / static_cast<double>(link.devices_per_node);
  // The node's devices run their rings at once, so each gets 1/devices_per_node of the node's link.
  const double per_device = std::min(link.intra_bandwidth, link.inter_bandwidth / link.devices_per_node);
  if (link.collective == CollectiveModel::nccl) {
    // NCCL's all-reduce over one rank per node (every hop crosses the network).
    const int rings_of = link.devices / link.devices_per_node;
    return nccl_ring_time(link.nccl, rings_of, 1, per_device, shard_bytes, NcclCollective::all_reduce).seconds;
  }
  return link.latency + 2.0 * shard_bytes * (nodes - 1.0) / nodes / per_device;
}

LayoutCosts::Transfer LayoutCosts::gather_of(const Step& step) const {
  const auto unit = static_cast<std::size_t>(step.unit);
  if (root_unit) {
    if (step.unit == 0 && step.phase == Phase::forward) return {true, root_gather, root_gather_inter_bytes, 0.0};
    if (step.unit == 0 || unit + 1 == gather.size()) return {};  // the root is still gathered
  }
  return {true, gather.at(unit), gather_inter_bytes.at(unit), 0.0};
}

LayoutCosts::Transfer LayoutCosts::hand_off_of(const Step& step) const {
  if (step.phase == Phase::forward) return {};
  const auto unit = static_cast<std::size_t>(step.unit);
  if (root_unit) {
    if (step.unit == 0) return {true, root_reduce, root_reduce_inter_bytes, root_reduce_bytes};
    if (unit + 1 == reduce.size()) return {};  // the head's gradient waits for the embedding's
  }
  return {true, reduce.at(unit), reduce_inter_bytes.at(unit), reduce_bytes.at(unit)};
}

LayoutCosts layout_costs(const UnitBytes& bytes, const LinkModel& link, CommKind comm, Sharding sharding,
                         bool root_unit) {
  LayoutCosts out;
  out.sharding = sharding;
  out.root_unit = root_unit;
  out.shard_group = link.devices;
  const bool nodes = link.spans_nodes();
  if (sharding != Sharding::full && nodes && link.devices % link.devices_per_node != 0) {
    fail("sim.sharding = {} needs full nodes: sim.devices = {} is not a multiple of sim.devices_per_node = {}",
         distributed::sharding_name(sharding), link.devices, link.devices_per_node);
  }
  const LinkModel node = node_link(link);
  // hybrid: everything inside the node; hpz: gathers from the node's copy, hand-offs world-wide.
  const LinkModel& gather_link = sharding == Sharding::full ? link : node;
  const LinkModel& reduce_link = sharding == Sharding::hybrid ? node : link;
  for (const double b : bytes.gather) {
    out.gather.push_back(gather_link.transfer_time(comm, b));
    out.gather_inter_bytes.push_back(gather_link.inter_node_bytes(comm, b));
  }
  out.reduce_bytes = bytes.reduce;
  for (const double b : bytes.reduce) {
    out.reduce.push_back(reduce_link.transfer_time(comm, b));
    out.reduce_inter_bytes.push_back(reduce_link.inter_node_bytes(comm, b));
  }
  if (root_unit) {
    out.root_gather = gather_link.transfer_time(comm, bytes.root_gather);
    out.root_gather_inter_bytes = gather_link.inter_node_bytes(comm, bytes.root_gather);
    out.root_reduce = reduce_link.transfer_time(comm, bytes.root_reduce);
    out.root_reduce_inter_bytes = reduce_link.inter_node_bytes(comm, bytes.root_reduce);
    out.root_reduce_bytes = bytes.root_reduce;
  }
  if (sharding == Sharding::hybrid) {
    out.shard_group = node.devices;
    if (nodes) {
      double gradient = 0.0;
      for (const double b : bytes.reduce) gradient += b;
      const double shard = gradient / static_cast<double>(node.devices);
      out.replica_sum_s = replica_all_reduce_time(link, shard);
      // devices_per_node rings of H devices, each device sending 2 * shard * (H-1)/H, all across nodes.
      const double h = static_cast<double>(link.devices / link.devices_per_node);
      out.replica_sum_inter_bytes = static_cast<double>(link.devices) * 2.0 * shard * (h - 1.0) / h;
    }
  }
  if (sharding == Sharding::hpz && nodes) {
    // One world-wide gather of every unit, one after another, then the node's barrier.
    for (const double b : bytes.gather) {
      out.refresh_s += link.transfer_time(comm, b);
      out.refresh_inter_bytes += link.inter_node_bytes(comm, b);
    }
    out.refresh_s += link.latency;
  }
  return out;
}

}  // namespace odc::sim
