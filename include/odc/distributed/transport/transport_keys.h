#pragma once
// The comm.* keys of the transports' options (TransportOptions), declared once (core/key.h): the
// trainer's schema lists them, TransportOptions takes its defaults and its checks from them.
#include <cstdint>
#include <string>
#include <limits>
#include "odc/core/key.h"

namespace odc::distributed {
// The smallest comm.chunk_bytes and comm.network_chunk_bytes: the keys' ranges, and what
// TransportOptions::validate checks of options built in code.
constexpr std::int64_t kMinChunkBytes = 4096;
}  // namespace odc::distributed

namespace odc::keys {

inline const Key<std::int64_t> comm_chunk_bytes{"comm.chunk_bytes", 1048576, "bytes per one-sided get or gradient push message to a peer on this host (ODC, shared memory)", Range::at_least(static_cast<double>(distributed::kMinChunkBytes))};
inline const Key<std::int64_t> comm_network_chunk_bytes{"comm.network_chunk_bytes", 4194304, "bytes per gather request's answer or gradient push message to a peer reached over the network "
              "(ODC over UCX: TCP, RDMA)", Range::at_least(static_cast<double>(distributed::kMinChunkBytes))};
inline const Key<std::int64_t> comm_max_inflight{"comm.max_inflight", 8, "ODC messages in flight per rank", Range::at_least(1).and_at_most(std::numeric_limits<int>::max())};
inline const Key<bool> comm_direct_load{"comm.direct_load", true, "ODC gathers copy straight from peers' shards where UCX maps them (shared memory); false forces "
              "ucp_get through the progress thread"};
inline const Key<std::string> comm_gather_protocol{"comm.gather_protocol", "auto", "how an ODC gather over UCX reads an owner's shard: get (one-sided ucp_get, or a plain copy where UCX "
              "maps the owner's memory here), request (a small message asks the owner's progress thread, which "
              "answers with the bytes, by rendezvous into the gathered buffer: fast over TCP, where UCX emulates "
              "gets in software), auto (per owner: get where its memory is mapped here through shared memory, else "
              "request)", {"auto", "get", "request"}};
inline const Key<double> comm_timeout_s{"comm.timeout_s", number("600"), "a wait on a peer longer than this is an error naming the peer", Range::above(0)};

}  // namespace odc::keys
