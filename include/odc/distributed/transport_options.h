#pragma once
// Tunables of ODC's one-sided transport (comm.* keys; UcxTransport).
#include <cstdint>

namespace odc::distributed {

struct TransportOptions {
  std::int64_t chunk_bytes = 1 << 20;  // size of one get or push message
  int max_inflight = 8;                // operations issued and not yet completed
  double timeout_s = 600.0;            // a wait longer than this is an error naming the peer
  bool direct_load = true;             // copy from/to peers' regions directly where UCX maps them
  std::int64_t slot_floats = 0;        // size of each client slot (0: no slots, message pushes only)
  int slots_per_client = 2;            // slots per (owner, client): pushes in flight per owner
};

}  // namespace odc::distributed
