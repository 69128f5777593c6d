#include "odc/distributed/transport/ucx/ucx_buffers.h"

#include <algorithm>

#include <fmt/format.h>

namespace odc::distributed {

std::int64_t ucx_slot_region_floats(const TransportOptions& options, int world) {
  return options.slot_floats * options.slots_per_client * world;
}

PlannedMemory ucx_planned_buffers(const TransportOptions& options, int world, std::int64_t owned, int ranks_on_host,
                                  bool on_device, bool host_state) {
  PlannedMemory m;
  // The region UCX maps holds the masters (the store's state) and a slot of the largest shard per
  // (client, slot).
  m.add("UCX gradient slots", ucx_slot_region_floats(options, world) * 4,
        fmt::format("{} ranks x {} slots x the largest shard ({} elements) x 4 B", world, options.slots_per_client,
                    count_text(options.slot_floats)),
        on_device);
  m.add("UCX push buffers (estimate)", static_cast<std::int64_t>(std::max(options.max_inflight, 1)) * options.chunk_bytes * 2,
        fmt::format("comm.max_inflight {} x comm.chunk_bytes, sending and receiving", options.max_inflight), on_device);
  if (host_state && options.direct_load && ranks_on_host > 1) {
    // Shared memory: the peers' masters this rank reads in place are in its resident set too.
    const int peers = std::min(ranks_on_host, world) - 1;
    m.add("peers' regions mapped here", peers * owned * 4,
          fmt::format("{} peers on this host x their master shards (comm.direct_load)", peers));
  }
  return m;
}

}  // namespace odc::distributed
