#pragma once
// What an IpcTransport allocates, from its shape's sizes and the options alone (no memory, no
// group): the memory plan lists these (comm_buffers.h), and the transport sizes its data slots
// with the same function, so the plan cannot drift from what is built.
#include <cstdint>

#include "odc/core/planned_memory.h"
#include "odc/distributed/transport/ipc/ipc_transport.h"
#include "odc/distributed/transport/transport_options.h"

namespace odc::distributed {

// Floats of one data slot: a chunk (comm.chunk_bytes), at most the largest shard (a push of one
// unit never cuts more).
std::int64_t ipc_slot_floats(const TransportOptions& options, std::int64_t largest_shard);

// On `world` ranks, the state on a device (`device_state`) or in host shared memory: the data
// slots its clients write (world x comm.max_inflight slots), with bf16 gathers the shadow of the
// masters and the gather staging, with comm.deterministic the per-client accumulators, and on the
// host the pages of the peers' regions this rank reads or writes (resident here, not allocated).
PlannedMemory ipc_planned_buffers(const IpcShape& shape, const TransportOptions& options, int world,
                                  bool device_state);

}  // namespace odc::distributed
