// The one check of the transports' options (comm.* keys): a config's values passed the keys'
// ranges as they loaded (transport_keys.h), options built in code are checked here.
#include "odc/distributed/transport/transport_options.h"

#include "odc/core/error.h"

namespace odc::distributed {

void TransportOptions::validate(std::int64_t min_chunk_bytes) const {
  if (chunk_bytes < min_chunk_bytes) fail("comm.chunk_bytes must be at least {}, found {}", min_chunk_bytes, chunk_bytes);
  if (network_chunk_bytes < kMinChunkBytes) {
    fail("comm.network_chunk_bytes must be at least {}, found {}", kMinChunkBytes, network_chunk_bytes);
  }
  if (max_inflight < 1) fail("comm.max_inflight must be at least 1, found {}", max_inflight);
  if (!(timeout_s > 0)) fail("comm.timeout_s must be positive, found {}", timeout_s);
}

}  // namespace odc::distributed
