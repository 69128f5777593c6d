#pragma once
// What the comm choose_comm picks will allocate beyond the store's state, known before anything is
// built: the unit buffers, each comm's and transport's own buffers (the transports report theirs:
// ipc_buffers.h, ucx_buffers.h), a staged comm's host copy. The memory plan lists these
// (train/plan/memory_plan.h); make_comm builds with the same sizes (ipc_shape,
// odc_transport_options), so the plan and the built comm cannot drift.
#include <cstdint>

#include "odc/core/planned_memory.h"
#include "odc/distributed/comm/comm_choice.h"
#include "odc/distributed/comm/comm_options.h"
#include "odc/distributed/shard/shard_layout.h"
#include "odc/distributed/transport/ipc/ipc_transport.h"
#include "odc/distributed/transport/transport_options.h"

namespace odc::distributed {

// The sizes of a shard layout the comms' buffers follow.
struct CommShape {
  int world = 1;
  std::int64_t owned = 0;           // elements this rank owns (every rank owns as many)
  std::int64_t largest_padded = 0;  // the largest unit, padded to the world
  std::int64_t largest_shard = 0;
  std::int64_t pool_floats = 0;     // what the unit buffer pool's buffers grow to (UnitBufferPool::planned_floats)
};
CommShape comm_shape(const ShardLayout& layout);

// The transport options make_comm gives an ODC transport of `build`: pushes from the pool's
// gradient buffers; UCX slots of the largest shard.
TransportOptions odc_transport_options(const CommOptions& options, CommBuild build, std::int64_t largest_shard);
// The sizes of the IPC transport's shape (make_comm adds the masters' region and handle).
IpcShape ipc_shape(const CommOptions& options, const CommShape& shape);

// What `choice` allocates on a rank of `shape.world` (`ranks_on_host` of them on its host), the
// state on a device (`device_state`) or on the host. One rank (local): nothing, the model computes
// on the store's own masters and gradients.
PlannedMemory planned_buffers(const CommChoice& choice, const CommOptions& options, const CommShape& shape,
                              bool device_state, int ranks_on_host);

}  // namespace odc::distributed
