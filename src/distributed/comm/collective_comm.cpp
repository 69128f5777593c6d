#include "odc/distributed/comm/collective_comm.h"

#include <limits>

#include "odc/core/error.h"
#include "odc/distributed/group/watchdog.h"

namespace odc::distributed {

namespace {
int count_of(std::int64_t n) {
  if (n > std::numeric_limits<int>::max()) fail("unit shard of {} elements exceeds MPI's int count", n);
  return static_cast<int>(n);
}

bool test(MPI_Request& request) {
  if (request == MPI_REQUEST_NULL) return true;
  int done = 0;
  MPI_Test(&request, &done, MPI_STATUS_IGNORE);
  return done != 0;
}
}  // namespace

CollectiveComm::CollectiveComm(ShardStore& store, MPI_Comm comm, Watchdog* watchdog)
    : ShardedComm(store.layout()),
      store_(store),
      comm_(comm),
      watchdog_(watchdog),
      gathers_(UnitBufferPool::kWeightBuffers, MPI_REQUEST_NULL),
      pushes_(UnitBufferPool::kGradBuffers, MPI_REQUEST_NULL) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &world_size_);
  const auto& layout = store.layout();
  if (layout.world_size() != world_size_ || layout.rank() != rank_) {
    fail("shard layout is for rank {} of {}, but the communicator has rank {} of {}", layout.rank(),
         layout.world_size(), rank_, world_size_);
  }
  std::int64_t largest_shard = 0;
  for (int u = 0; u < layout.num_units(); ++u) largest_shard = std::max(largest_shard, layout.unit(u).shard);
  for (int i = 0; i < UnitBufferPool::kGradBuffers; ++i) received_.emplace_back(Shape{largest_shard}, DType::f32);
}

PlannedMemory CollectiveComm::allocated() const {
  PlannedMemory m;
  m.add("unit buffers", pool_.allocated_floats() * static_cast<std::int64_t>(sizeof(float)), "allocated");
  std::int64_t received = 0;
  for (const auto& r : received_) received += r.numel() * static_cast<std::int64_t>(sizeof(float));
  m.add("reduce-scatter receive buffers", received, "allocated");
  return m;
}

CollectiveComm::~CollectiveComm() {
  // Requests must not outlive their buffers; on an error path the peers are gone or aborting, so
  // cancel what cannot complete rather than wait for it.
  for (auto* requests : {&gathers_, &pushes_}) {
    for (auto& r : *requests) {
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
    }
  }
}

void CollectiveComm::start_gather(int unit, int buffer, float* full) {
  const int count = count_of(store_.layout().unit(unit).shard);
  MPI_Iallgather(store_.master(unit), count, MPI_FLOAT, full, count, MPI_FLOAT, comm_,
                 &gathers_[static_cast<std::size_t>(buffer)]);
}

bool CollectiveComm::gather_done(int buffer) { return test(gathers_[static_cast<std::size_t>(buffer)]); }

void CollectiveComm::wait_gather(int, int buffer) {
  auto& request = gathers_[static_cast<std::size_t>(buffer)];
  if (request == MPI_REQUEST_NULL) return;
  const Watchdog::Wait watch(watchdog_, "an all-gather of unit weights");
  MPI_Wait(&request, MPI_STATUS_IGNORE);
}

void CollectiveComm::start_push(int unit, int buffer, const float* full) {
  const int count = count_of(store_.layout().unit(unit).shard);
  MPI_Ireduce_scatter_block(full, received_[static_cast<std::size_t>(buffer)].data<float>(), count, MPI_FLOAT, MPI_SUM,
                            comm_, &pushes_[static_cast<std::size_t>(buffer)]);
}

bool CollectiveComm::push_done(int buffer) { return test(pushes_[static_cast<std::size_t>(buffer)]); }

void CollectiveComm::wait_push(int, int buffer) {
  auto& request = pushes_[static_cast<std::size_t>(buffer)];
  if (request == MPI_REQUEST_NULL) return;
  const Watchdog::Wait watch(watchdog_, "a reduce-scatter of unit gradients");
  MPI_Wait(&request, MPI_STATUS_IGNORE);
}

void CollectiveComm::finish_push(int unit, int buffer) {
  float* acc = store_.grad(unit);
  const float* in = received_[static_cast<std::size_t>(buffer)].data<float>();
  const std::int64_t n = store_.layout().unit(unit).shard;
  for (std::int64_t i = 0; i < n; ++i) acc[i] += in[i];
}

void CollectiveComm::begin_minibatch() {
  store_.zero_grads();
  pool_.check_idle();
}

void CollectiveComm::end_minibatch() { pool_.drain(); }

}  // namespace odc::distributed
