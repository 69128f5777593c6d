#pragma once
// What the comm-buffer tests (threads: tests/unit/distributed/comm/test_comm_buffers.cpp; MPI:
// tests/mpi/test_comm_buffers.cpp) run before they hold a comm's allocations to its plan.
#include <algorithm>
#include <cstdint>

#include "odc/distributed/comm/comm.h"
#include "odc/distributed/shard/shard_layout.h"

namespace odc::test {

// A minibatch over every unit: each gathered (the next prefetched), its gradient pushed.
inline void one_minibatch(distributed::Comm& comm, int units) {
  comm.begin_minibatch();
  for (int u = 0; u < units; ++u) {
    if (u + 1 < units) comm.prefetch(u + 1);  // as the model: the next unit while this one computes
    comm.acquire(u);
    comm.release(u);
  }
  for (int u = units - 1; u >= 0; --u) {
    comm.acquire(u);
    comm.grad_buffer(u);
    comm.push_grad(u);
    comm.release(u);
  }
  comm.end_minibatch();
}

// The padded elements of the largest decoder layer (the unit buffers' plan is within one of them).
inline std::int64_t largest_layer(const distributed::ShardLayout& layout) {
  std::int64_t layer = 0;
  for (int u = 1; u + 1 < layout.num_units(); ++u) layer = std::max(layer, layout.unit(u).padded);
  return layer;
}

}  // namespace odc::test
