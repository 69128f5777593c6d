#include "odc/sim/nccl_ring.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>

#include "odc/core/error.h"
#include "odc/core/text.h"

namespace odc::sim {

namespace {

// NCCL's ring latencies in microseconds, indexed by NcclProtocol (LL, LL128, Simple).
constexpr std::array<double, 3> kBaseLatencyUs = {3.6, 10.0, 8.4};
constexpr std::array<double, 3> kNvlinkHopUs = {0.47, 1.9, 3.4};
constexpr std::array<double, 3> kNetHopUs = {2.7, 4.0, 9.6};

}  // namespace

const char* nccl_protocol_name(NcclProtocol protocol) {
  switch (protocol) {
    case NcclProtocol::ll: return "LL";
    case NcclProtocol::ll128: return "LL128";
    case NcclProtocol::simple: return "Simple";
  }
  return "?";
}

double nccl_bus_cap(const DeviceSpec& device) {
  return device.name == "a100-80gb" ? 235e9 : std::numeric_limits<double>::infinity();
}

NcclRing NcclRing::with_protocols(const std::string& list, const std::string& key) {
  NcclRing ring;
  ring.ll = ring.ll128 = ring.simple = false;
  for (const auto& raw : split_trimmed(list)) {
    const std::string item = lower_ascii(raw);
    if (item == "ll") {
      ring.ll = true;
    } else if (item == "ll128") {
      ring.ll128 = true;
    } else if (item == "simple") {
      ring.simple = true;
    } else if (!item.empty()) {
      fail("{}: '{}' is not an NCCL protocol (expected a comma-separated subset of ll, ll128, simple)", key, raw);
    }
  }
  if (!ring.ll && !ring.ll128 && !ring.simple) {
    fail("{}: no protocol enabled in '{}' (expected a comma-separated subset of ll, ll128, simple)", key, list);
  }
  return ring;
}

void NcclRing::validate() const {
  if (!(max_bus_bandwidth > 0.0)) {  // infinity: uncapped
    fail("sim.nccl_max_bus_gbps must be positive, found {} Gb/s", max_bus_bandwidth * 8.0 / 1e9);
  }
  if (!ll && !ll128 && !simple) fail("sim.nccl_protocols enables no protocol");
}

NcclTime nccl_ring_time(const NcclRing& ring, int devices, int devices_per_node, double link_bandwidth,
                        double bytes, NcclCollective collective) {
  if (devices <= 1 || bytes <= 0.0) return {};
  if (!(link_bandwidth > 0.0)) fail("nccl_ring_time: the ring's link bandwidth must be positive");
  const int local = std::max(1, std::min(devices, devices_per_node));
  const int nodes = (devices + local - 1) / local;
  const bool all_reduce = collective == NcclCollective::all_reduce;
  const int steps = all_reduce ? 2 * (devices - 1) : devices - 1;
  const int net_steps = all_reduce ? 2 * (nodes - 1) : nodes - 1;
  const int nvlink_steps = steps - net_steps;
  const double ranks_per_node = static_cast<double>(devices) / static_cast<double>(nodes);
  const double bus = std::min(link_bandwidth, ring.max_bus_bandwidth);
  const double to_algorithm = static_cast<double>(devices) / static_cast<double>(steps);

  NcclTime best;
  best.seconds = std::numeric_limits<double>::infinity();
  const std::array<bool, 3> enabled = {ring.ll, ring.ll128, ring.simple};
  for (int p = 0; p < 3; ++p) {
    if (!enabled[static_cast<std::size_t>(p)]) continue;
    const auto protocol = static_cast<NcclProtocol>(p);
    double protocol_bus = bus;
    if (protocol == NcclProtocol::ll) protocol_bus = bus * (nodes > 1 || all_reduce ? 1.0 / 4.0 : 1.0 / 3.0);
    if (protocol == NcclProtocol::ll128) protocol_bus = bus * (ranks_per_node < 2.0 ? 0.7 : 0.92);
    double nvlink_hop = kNvlinkHopUs[static_cast<std::size_t>(p)];
    if (nodes > 1 && protocol == NcclProtocol::ll) nvlink_hop *= 1.8;
    const double latency_us = kBaseLatencyUs[static_cast<std::size_t>(p)] + nvlink_steps * nvlink_hop +
                              net_steps * kNetHopUs[static_cast<std::size_t>(p)];
    const bool plateau = all_reduce && protocol == NcclProtocol::simple && nodes > 1 &&
                         bytes >= static_cast<double>(devices) / 16.0 * 65536.0;
    const double latency = latency_us * (plateau ? 1.9 : 1.0) * 1e-6;
    const double seconds = latency + bytes / (protocol_bus * to_algorithm);
    if (seconds < best.seconds) best = {seconds, protocol, latency, protocol_bus};
  }
  return best;
}

}  // namespace odc::sim
