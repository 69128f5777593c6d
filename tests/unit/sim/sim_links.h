#pragma once
// The links the simulator's tests share: A100 nodes of 8 devices, NVLink 300 GB/s per device,
// 800 Gb/s (100 GB/s) RoCE per node, as the paper's cluster.
#include "odc/sim/link_model.h"

namespace odc::sim::test {

inline LinkModel a100_nodes(int devices, double latency = 0.0) {
  LinkModel link;
  link.devices = devices;
  link.devices_per_node = 8;
  link.intra_bandwidth = 300e9;
  link.inter_bandwidth = 100e9;
  link.latency = latency;
  return link;
}

}  // namespace odc::sim::test
