#include "odc/sim/link_model.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "odc/core/error.h"
#include "odc/model/units.h"

namespace odc::sim {

const char* comm_name(CommKind comm) { return comm == CommKind::odc ? "odc" : "collective"; }

CommKind parse_comm(const std::string& name) {
  if (name == "odc") return CommKind::odc;
  if (name == "collective") return CommKind::collective;
  fail("unknown comm '{}' (expected odc or collective)", name);
}

const char* collective_model_name(CollectiveModel model) {
  return model == CollectiveModel::nccl ? "nccl" : "bandwidth";
}

CollectiveModel parse_collective_model(const std::string& name, const std::string& key) {
  if (name == "bandwidth") return CollectiveModel::bandwidth;
  if (name == "nccl") return CollectiveModel::nccl;
  fail("{} must be bandwidth or nccl, found '{}'", key, name);
}

double LinkModel::transfer_time(CommKind comm, double bytes) const {
  if (devices <= 1 || bytes <= 0.0) return 0.0;
  const auto d = static_cast<double>(devices);
  if (intra_bandwidth <= 0.0 && inter_bandwidth <= 0.0) return latency;  // free links
  if (comm == CommKind::collective) {
    const double bottleneck = spans_nodes() ? std::min(intra_bandwidth, inter_bandwidth) : intra_bandwidth;
    if (collective == CollectiveModel::nccl) {
      return nccl_ring_time(nccl, devices, devices_per_node, bottleneck, bytes).seconds;
    }
    return latency + bytes * (d - 1.0) / d / bottleneck;
  }
  const int local = std::min(devices, devices_per_node);
  const double shard = bytes / d;
  const double intra = shard * (local - 1) / intra_bandwidth;
  double inter = 0.0;
  if (spans_nodes()) {
    // Every device of the node pulls its remote shards through the node's link at the same time.
    const double per_device = inter_bandwidth / local * odc_inter_efficiency;
    inter = shard * (devices - local) / per_device;
  }
  // Same-node and remote transfers use different links and overlap.
  return latency + std::max(intra, inter);
}

double LinkModel::inter_node_bytes(CommKind comm, double bytes) const {
  if (!spans_nodes() || bytes <= 0.0) return 0.0;
  const auto d = static_cast<double>(devices);
  if (comm == CommKind::collective) {
    const double nodes = d / static_cast<double>(devices_per_node);
    return nodes * bytes * (d - 1.0) / d;
  }
  return bytes / d * static_cast<double>(devices - devices_per_node);
}

LinkModel LinkModel::free(int devices) {
  LinkModel link;
  link.devices = devices;
  link.devices_per_node = devices;
  return link;
}

void LinkModel::validate() const {
  if (devices < 1) fail("sim.devices must be at least 1, found {}", devices);
  if (devices_per_node < 1) fail("sim.devices_per_node must be at least 1, found {}", devices_per_node);
  if (spans_nodes() && devices % devices_per_node != 0) {
    fail("sim.devices = {} is not a multiple of sim.devices_per_node = {} (nodes must be full)", devices,
         devices_per_node);
  }
  if (devices > 1 && !(intra_bandwidth > 0.0)) {
    fail("sim.intra_node_gbps must be positive, found {} Gb/s", intra_bandwidth * 8.0 / 1e9);
  }
  if (spans_nodes() && !(inter_bandwidth > 0.0)) {
    fail("sim.inter_node_gbps must be positive when sim.devices ({}) spans several nodes of {}, found {} Gb/s",
         devices, devices_per_node, inter_bandwidth * 8.0 / 1e9);
  }
  if (!(odc_inter_efficiency > 0.0 && odc_inter_efficiency <= 1.0)) {
    fail("sim.odc_inter_node_efficiency must be in (0, 1], found {}", odc_inter_efficiency);
  }
  if (!(latency >= 0.0) || !std::isfinite(latency)) fail("sim.latency_us must be >= 0, found {}", latency * 1e6);
  if (collective == CollectiveModel::nccl) nccl.validate();
}

UnitBytes unit_bytes(const model::LlamaConfig& config, double param_bytes, double grad_bytes) {
  if (!(param_bytes > 0.0)) fail("sim.param_bytes must be positive, found {}", param_bytes);
  if (!(grad_bytes > 0.0)) fail("sim.grad_bytes must be positive, found {}", grad_bytes);
  UnitBytes out;
  const auto layouts = model::build_unit_layouts(config);
  for (const auto& unit : layouts) {
    out.gather.push_back(static_cast<double>(unit.numel) * param_bytes);
    out.reduce.push_back(static_cast<double>(unit.numel) * grad_bytes);
  }
  // The root unit holds the embedding and the head's own parameters once.
  out.root_gather = out.gather.front() + out.gather.back();
  out.root_reduce = out.reduce.front() + out.reduce.back();
  if (config.tie_word_embeddings) {
    const auto embedding = static_cast<double>(layouts.front().numel);
    out.gather.back() += embedding * param_bytes;
    out.reduce.back() += embedding * grad_bytes;
  }
  return out;
}

}  // namespace odc::sim
