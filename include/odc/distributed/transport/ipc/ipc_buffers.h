#pragma once
// What an IpcTransport allocates, from its shape's sizes and the options alone (no memory, no
// group): the memory plan lists these (comm_buffers.h), and the transport sizes its data slots
// with the same function, so the plan cannot drift from what is built.
#include <cstdint>
#include <string>

#include "odc/core/planned_memory.h"
#include "odc/distributed/transport/transport_options.h"

namespace odc::distributed {

// What an IpcTransport serves (from the shard layout and the comm's buffers).
struct IpcShape {
  float* masters = nullptr;         // this rank's master shards, a region exported from the memory
  std::string master_handle;        // ... and its handle
  std::int64_t owned = 0;           // floats of it
  std::int64_t largest_shard = 1;   // of any unit: a data slot holds no more
  std::int64_t largest_unit = 1;    // padded elements of any unit (bf16 gathers' staging)
  int gather_buffers = 1;           // unit buffers gathered into (UnitBufferPool)
  bool bf16_gathers = false;        // gathers read a bf16 shadow of the masters (comm.gather_dtype)
  bool deterministic = false;       // per-client accumulators in this memory (comm.deterministic)
};

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
