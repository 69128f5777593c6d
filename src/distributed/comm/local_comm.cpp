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

}  // namespace odc::distributed
