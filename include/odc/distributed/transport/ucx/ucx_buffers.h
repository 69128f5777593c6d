#pragma once
// What a UcxTransport allocates, from the options alone (no UCX context, no group): the memory
// plan lists these (comm_buffers.h), and the transport sizes the region it maps with the same
// function, so the plan cannot drift from what is built.
#include <cstdint>

#include "odc/core/planned_memory.h"
#include "odc/distributed/transport/transport_options.h"

namespace odc::distributed {

// Floats of the exposed region past the masters: slots_per_client slots of slot_floats per client.
std::int64_t ucx_slot_region_floats(const TransportOptions& options, int world);

// On `world` ranks, `ranks_on_host` of them here, `owned` master floats each: the gradient slots of
// the mapped region, the push messages in flight (an estimate) and, where UCX maps the peers'
// regions here (host state, comm.direct_load), the peers' masters this rank reads in place.
// `on_device`: whether these count as the compute device's memory (false where a device's state
// is staged through them); `host_state`: the masters are this rank's host memory.
PlannedMemory ucx_planned_buffers(const TransportOptions& options, int world, std::int64_t owned, int ranks_on_host,
                                  bool on_device, bool host_state);

}  // namespace odc::distributed
