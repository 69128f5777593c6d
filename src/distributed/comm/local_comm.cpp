#include "odc/distributed/comm/local_comm.h"

#include "odc/core/error.h"

namespace odc::distributed {

LocalComm::LocalComm(ShardStore& store) : store_(store) {
  if (store.layout().world_size() != 1) {
    fail("LocalComm serves a world of one rank, but the shard layout has {} ranks",
         store.layout().world_size());
  }
}

void LocalComm::begin_minibatch() { store_.zero_grads(); }

float* LocalComm::grad_buffer(int unit) {
  if (store_.contents() != StoreContents::all) {
    fail("unit {}: a gradient was asked of a weights-only store, which serves forwards only (no gradients or "
         "optimizer state)", unit);
  }
  return store_.grad(unit);
}

}  // namespace odc::distributed
