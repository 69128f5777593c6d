#pragma once
// Tunables of ODC's one-sided transport (comm.* keys, declared in transport_keys.h: the fields a
// key sets take their defaults from it; UcxTransport, IpcTransport).
#include <cstdint>
#include <string_view>

#include "odc/distributed/transport/transport_keys.h"

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
  // comm.chunk_bytes: size of one get or push message to a peer mapped here (shared memory)
  std::int64_t chunk_bytes = keys::comm_chunk_bytes.default_value();
  // comm.network_chunk_bytes: ... and to a peer reached over the network (request gathers'
  // answers, push messages): larger, since every message there costs the owner's progress thread a
  // wake-up and a TCP round.
  std::int64_t network_chunk_bytes = keys::comm_network_chunk_bytes.default_value();
  // comm.max_inflight: operations issued and not yet completed
  int max_inflight = static_cast<int>(keys::comm_max_inflight.default_value());
  double timeout_s = keys::comm_timeout_s.default_value();  // comm.timeout_s: a longer wait names the peer
  bool direct_load = keys::comm_direct_load.default_value();  // comm.direct_load: copy from/to mapped regions
  std::int64_t slot_floats = 0;        // size of each client slot (0: no slots, message pushes only)
  int slots_per_client = 2;            // slots per (owner, client): pushes in flight per owner
  int push_buffers = 1;                // gradient buffers pushed from at once (OdcTransport::start_push's `buffer`)
  // comm.gather_protocol
  GatherProtocol gather_protocol = parse_gather_protocol(keys::comm_gather_protocol.default_value());

  // The keys' ranges checked of options built in code (a config's values passed them as they
  // loaded): odc::Error naming the key, e.g. "comm.chunk_bytes must be at least 4096, found 8".
  // `min_chunk_bytes`: kMinChunkBytes (the key's range; UCX), or less where a transport works with
  // smaller messages and code asks for them (IPC: a float; the unit tests' many-chunk shards).
  void validate(std::int64_t min_chunk_bytes = kMinChunkBytes) const;
};

}  // namespace odc::distributed
