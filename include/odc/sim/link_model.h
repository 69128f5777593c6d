#pragma once
// Communication costs for the simulator: how long one unit's parameter gather and one unit's
// gradient reduction take under each comm, from the bytes involved and the links.
//
// Topology: `devices` devices, `devices_per_node` per node (ranks of a node contiguous). Each
// device has `intra_bandwidth` bytes/s to its node's switch (per direction); each node has
// `inter_bandwidth` bytes/s to the network (per direction, shared by its devices).
//
//   collective (ring all-gather / reduce-scatter, as NCCL runs them): every device moves
//     bytes*(D-1)/D through the slowest hop of the ring. Across nodes the ring crosses each node
//     boundary once per channel, so that hop runs at the node's inter-node bandwidth.
//   odc (point-to-point pulls / pushes from/to every owner, no hierarchy): a device exchanges
//     bytes/D with each peer; its same-node peers over the switch and its remote peers over the
//     node's network link, which all devices_per_node devices of the node use at once. A flat
//     pattern thus moves devices_per_node times more bytes across the node boundary than a ring
//     (the paper's "several times slower across nodes at 16+ GPUs"); `odc_inter_efficiency`
//     additionally scales the bandwidth point-to-point traffic achieves (an assumption).
// Both add `latency` per operation. With `collective = nccl` a collective instead takes NCCL's own
// cost model of a ring (odc/sim/nccl_ring.h: its latency per hop and its protocols' bandwidths by
// message size, capped bus bandwidth), as its tuner predicts the calls FSDP makes. Gathers (inbound) and pushes (outbound) use opposite
// directions of the links and are modeled as independent channels; compute does not slow them.
#include <cstdint>
#include <string>
#include <vector>

#include "odc/model/llama_config.h"
#include "odc/sim/nccl_ring.h"

namespace odc::sim {

enum class CommKind : std::uint8_t { collective, odc };
const char* comm_name(CommKind comm);
CommKind parse_comm(const std::string& name);  // "collective" | "odc", else odc::Error

// How a collective's time is modeled (sim.collective_model): bandwidth = latency + the ring's bytes
// over its slowest link; nccl = NCCL's tuning model (NcclRing).
enum class CollectiveModel : std::uint8_t { bandwidth, nccl };
const char* collective_model_name(CollectiveModel model);
CollectiveModel parse_collective_model(const std::string& name, const std::string& key);

struct LinkModel {
  int devices = 1;
  int devices_per_node = 1;
  double intra_bandwidth = 0.0;  // bytes/s per device per direction
  double inter_bandwidth = 0.0;  // bytes/s per node per direction
  double odc_inter_efficiency = 1.0;
  double latency = 0.0;          // seconds per operation
  CollectiveModel collective = CollectiveModel::bandwidth;
  NcclRing nccl;                 // with collective = nccl

  // Time of one all-gather (collective) or gather (odc) of a unit whose full size is `bytes`;
  // the same for reduce-scatter / scatter-accumulate of `bytes` of gradient.
  double transfer_time(CommKind comm, double bytes) const;
  // Bytes of that operation crossing node boundaries (each counted once, leaving one node for
  // another): odc, the one device's remote shards (bytes/D per peer on another node); collective,
  // the whole ring's (each of the nodes' boundary hops carries bytes*(D-1)/D). 0 within a node.
  double inter_node_bytes(CommKind comm, double bytes) const;
  bool spans_nodes() const { return devices > devices_per_node; }
  // Communication that takes no time (the zero-overhead bound and tests).
  static LinkModel free(int devices);
  // Throws odc::Error naming the sim.* key of a value out of range.
  void validate() const;
};

// Bytes moved per unit: the gathered parameters and the reduced gradient of units 0..L+1.
struct UnitBytes {
  std::vector<double> gather;  // full (unsharded) parameters of the unit
  std::vector<double> reduce;  // full gradient of the unit
  // FSDP's root unit (ScheduleOptions::fsdp_root_unit): the embedding and the head's parameters (the
  // final norm and LM head; a tied embedding counted once), as one unit.
  double root_gather = 0.0;
  double root_reduce = 0.0;
};
// param_bytes / grad_bytes: bytes per element moved. With tied embeddings the head also needs
// (and produces a gradient for) the embedding matrix, which it then gathers and pushes itself.
UnitBytes unit_bytes(const model::LlamaConfig& config, double param_bytes, double grad_bytes);

}  // namespace odc::sim
