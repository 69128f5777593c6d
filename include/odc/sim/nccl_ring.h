#pragma once
// How long NCCL takes for one ring all-gather or reduce-scatter: NCCL's own cost model, the one its
// tuner uses to pick a protocol for every call (ncclTopoTuneModel and ncclTopoGetAlgoTime in NCCL's
// src/graph/tuning.cc, the generation that ran on the paper's A100 clusters), re-derived here:
//
//   time(protocol) = latency(protocol) + bytes / algorithm bandwidth(protocol)
//   latency        = base latency + (D-1 - (N-1)) hops inside a node + (N-1) hops between nodes
//                    (an all-gather or reduce-scatter ring over D ranks on N nodes takes D-1 steps,
//                    N-1 of which cross the network)
//   algorithm bw   = bus bandwidth * D / (D-1)          (a ring moves bytes*(D-1)/D per rank)
//   bus bandwidth  = the ring's slowest hop (the device's switch link in one node, the node's
//                    network link once the ring spans nodes), capped at max_bus_bandwidth (NCCL caps
//                    compute capability 8.0 at 235 GB/s), then per protocol: Simple as is, LL128
//                    0.92 of it (0.7 with one rank per node), LL a third in one node and a quarter
//                    across nodes.
//
// NCCL's table of latencies (microseconds; ring, per protocol LL / LL128 / Simple):
//   base 3.6 / 10.0 / 8.4;  an NVLink hop 0.47 / 1.9 / 3.4;  a network hop 2.7 / 4.0 / 9.6;
//   across nodes the LL NVLink hop counts 1.8 times.
// The tuner takes the fastest enabled protocol for the message: LL for small messages (low latency,
// a fraction of the bandwidth), Simple for large ones (a decoder layer's parameters), LL128 between.
// `bytes` is the whole unit (NCCL's nBytes of an all-gather: the gathered output).
#include <cstdint>
#include <string>

#include "odc/core/device_specs.h"

namespace odc::sim {

enum class NcclProtocol : std::uint8_t { ll, ll128, simple };
const char* nccl_protocol_name(NcclProtocol protocol);

struct NcclRing {
  double max_bus_bandwidth = 235e9;  // bytes/s (sim.nccl_max_bus_gbps); infinity = uncapped
  bool ll = true;                    // protocols the tuner may choose (sim.nccl_protocols, as NCCL_PROTO)
  bool ll128 = true;
  bool simple = true;
  // Parses "ll,ll128,simple" (any non-empty subset, case-insensitive); odc::Error naming `key`.
  static NcclRing with_protocols(const std::string& list, const std::string& key);
  // Throws odc::Error naming the sim.* key of a value out of range.
  void validate() const;
};

struct NcclTime {
  double seconds = 0.0;
  NcclProtocol protocol = NcclProtocol::simple;
  double latency = 0.0;        // seconds
  double bus_bandwidth = 0.0;  // bytes/s, the chosen protocol's
};

// The bus bandwidth NCCL's tuning caps a device's rings at: 235 GB/s for compute capability 8.0
// (a100-80gb); the others uncapped (infinity: the link's bandwidth holds).
double nccl_bus_cap(const DeviceSpec& device);

// The ring collectives the simulator times. An all-reduce is a reduce-scatter then an all-gather:
// 2(D-1) steps, 2(N-1) of them across nodes, algorithm bandwidth bus * D / (2(D-1)); LL at a
// quarter of the bus bandwidth, and across nodes Simple's latency counts 1.9 times once the message
// reaches D/16 * 64 KiB (the tuner's "plateau effect of ring").
enum class NcclCollective : std::uint8_t { all_gather, reduce_scatter, all_reduce };

// One collective of `bytes` over `devices` ranks, `devices_per_node` per node (`bytes`: an
// all-gather's whole output, a reduce-scatter's whole input, an all-reduce's buffer); `link_bandwidth`
// is the ring's slowest hop before NCCL's cap (bytes/s). 0 for one rank or no bytes.
NcclTime nccl_ring_time(const NcclRing& ring, int devices, int devices_per_node, double link_bandwidth,
                        double bytes, NcclCollective collective = NcclCollective::all_gather);

}  // namespace odc::sim
