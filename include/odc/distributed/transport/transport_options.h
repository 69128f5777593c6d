#pragma once
// Tunables of ODC's one-sided transport (comm.* keys; UcxTransport).
#include <cstdint>
#include <string_view>

namespace odc::distributed {

// How a gather reads an owner's shard (comm.gather_protocol):
//   get:       one-sided ucp_get (or a plain copy where UCX maps the owner's region here);
//   request:   a small active message asks the owner's progress thread, which answers with the
//              bytes as active-message payload (rendezvous: received straight into the destination);
//   automatic: per owner, get where its region is mapped here (shared memory), request otherwise.
enum class GatherProtocol { automatic, get, request };
GatherProtocol parse_gather_protocol(std::string_view name);  // "auto" | "get" | "request"
std::string_view gather_protocol_name(GatherProtocol protocol);

struct TransportOptions {
  std::int64_t chunk_bytes = 1 << 20;  // size of one get or push message to a peer mapped here (shared memory)
  // ... and to a peer reached over the network (request gathers' answers, push messages): larger,
  // since every message there costs the owner's progress thread a wake-up and a TCP round.
  std::int64_t network_chunk_bytes = 4 << 20;
  int max_inflight = 8;                // operations issued and not yet completed
  double timeout_s = 600.0;            // a wait longer than this is an error naming the peer
  bool direct_load = true;             // copy from/to peers' regions directly where UCX maps them
  std::int64_t slot_floats = 0;        // size of each client slot (0: no slots, message pushes only)
  int slots_per_client = 2;            // slots per (owner, client): pushes in flight per owner
  int push_buffers = 1;                // gradient buffers pushed from at once (OdcTransport::start_push's `buffer`)
  GatherProtocol gather_protocol = GatherProtocol::automatic;
};

}  // namespace odc::distributed
