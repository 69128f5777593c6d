#include "odc/distributed/collective_comm.h"

#include <chrono>
#include <cstring>
#include <limits>

#include "odc/core/error.h"
#include "odc/distributed/watchdog.h"

namespace odc::distributed {

namespace {
// Tied embeddings keep unit 0 acquired across the forward while the current unit is in use and
// the next is being prefetched.
constexpr int kWeightSlots = 3;
// One gradient open for the unit being computed, one in flight being reduced, and unit 0's kept
// open across the backward with tied embeddings.
constexpr int kGradSlots = 3;

int count_of(std::int64_t n) {
  if (n > std::numeric_limits<int>::max()) fail("unit shard of {} elements exceeds MPI's int count", n);
  return static_cast<int>(n);
}
}  // namespace

CollectiveComm::CollectiveComm(ShardStore& store, MPI_Comm comm) : store_(store), comm_(comm) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &world_size_);
  const auto& layout = store.layout();
  if (layout.world_size() != world_size_ || layout.rank() != rank_) {
    fail("shard layout is for rank {} of {}, but the communicator has rank {} of {}", layout.rank(),
         layout.world_size(), rank_, world_size_);
  }
  std::int64_t largest_shard = 0;
  for (int u = 0; u < layout.num_units(); ++u) largest_shard = std::max(largest_shard, layout.unit(u).shard);
  const std::int64_t largest = layout.largest_padded_unit();
  for (int i = 0; i < kWeightSlots; ++i) weights_.push_back({Tensor(Shape{largest}, DType::f32)});
  for (int i = 0; i < kGradSlots; ++i) {
    grads_.push_back({Tensor(Shape{largest}, DType::f32), Tensor(Shape{largest_shard}, DType::f32)});
  }
}

CollectiveComm::~CollectiveComm() {
  // Requests must not outlive their buffers; on an error path the peers are gone or aborting, so
  // cancel what cannot complete rather than wait for it.
  for (auto& w : weights_) {
    if (w.request != MPI_REQUEST_NULL) MPI_Request_free(&w.request);
  }
  for (auto& g : grads_) {
    if (g.request != MPI_REQUEST_NULL) MPI_Request_free(&g.request);
  }
}

void CollectiveComm::wait(MPI_Request& request, int unit, bool gather) {
  if (request == MPI_REQUEST_NULL) return;
  int done = 0;
  MPI_Test(&request, &done, MPI_STATUS_IGNORE);
  if (done) return;
  const char* kind = in_end_ ? "barrier wait " : gather ? "gather wait " : "push wait ";
  const TraceScope trace(tracer_, "wait", kind + store_.layout().unit(unit).name, {{"unit", unit}});
  const auto start = std::chrono::steady_clock::now();
  {
    const Watchdog::Wait watch(watchdog_, gather ? "an all-gather of unit weights" : "a reduce-scatter of unit gradients");
    MPI_Wait(&request, MPI_STATUS_IGNORE);
  }
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  (in_end_ ? waits_.barrier_s : gather ? waits_.gather_s : waits_.push_s) += waited;
}

CollectiveComm::WeightSlot* CollectiveComm::find_weights(int unit) {
  for (auto& w : weights_) {
    if (w.unit == unit) return &w;
  }
  return nullptr;
}

CollectiveComm::WeightSlot& CollectiveComm::start_gather(int unit) {
  WeightSlot* slot = nullptr;
  for (auto& w : weights_) {
    if (!w.in_use && w.request == MPI_REQUEST_NULL && (slot == nullptr || w.unit == -1)) slot = &w;
  }
  ODC_CHECK(slot != nullptr, "no free weight buffer for unit {}", unit);
  const auto& layout = store_.layout();
  const int count = count_of(layout.unit(unit).shard);
  slot->unit = unit;
  MPI_Iallgather(store_.master(unit), count, MPI_FLOAT, slot->buffer.data<float>(), count, MPI_FLOAT, comm_,
                 &slot->request);
  return *slot;
}

void CollectiveComm::prefetch(int unit) {
  if (unit < 0 || unit >= store_.layout().num_units() || find_weights(unit) != nullptr) return;
  // Prefetch only into a buffer nobody holds; otherwise the acquire gathers on demand.
  for (const auto& w : weights_) {
    if (!w.in_use && w.request == MPI_REQUEST_NULL) {
      start_gather(unit);
      return;
    }
  }
}

const float* CollectiveComm::acquire(int unit) {
  WeightSlot* slot = find_weights(unit);
  if (slot == nullptr) slot = &start_gather(unit);
  wait(slot->request, unit, true);
  ODC_CHECK(!slot->in_use, "unit {} acquired twice", unit);
  slot->in_use = true;
  return slot->buffer.data<float>();
}

void CollectiveComm::release(int unit) {
  WeightSlot* slot = find_weights(unit);
  ODC_CHECK(slot != nullptr && slot->in_use, "release of unit {} that is not acquired", unit);
  // The buffer is reused for another unit: a later acquire of this unit gathers again, as FSDP's
  // reshard-after-forward does, because the weights may only be held while computing.
  slot->in_use = false;
  slot->unit = -1;
}

float* CollectiveComm::grad_buffer(int unit) {
  GradSlot* slot = nullptr;
  for (auto& g : grads_) {
    ODC_CHECK(!(g.open && g.unit == unit), "gradient buffer of unit {} requested twice", unit);
    if (!g.open && (slot == nullptr || slot->request != MPI_REQUEST_NULL)) slot = &g;
  }
  ODC_CHECK(slot != nullptr, "no free gradient buffer for unit {}", unit);
  finish_reduce(*slot);  // the oldest in-flight reduction, if this slot still carries one
  slot->unit = unit;
  slot->open = true;
  std::memset(slot->buffer.raw(), 0, static_cast<std::size_t>(store_.layout().unit(unit).padded) * sizeof(float));
  return slot->buffer.data<float>();
}

void CollectiveComm::push_grad(int unit) {
  for (auto& g : grads_) {
    if (g.open && g.unit == unit) {
      g.open = false;
      const int count = count_of(store_.layout().unit(unit).shard);
      MPI_Ireduce_scatter_block(g.buffer.data<float>(), g.received.data<float>(), count, MPI_FLOAT, MPI_SUM, comm_,
                                &g.request);
      return;
    }
  }
  ODC_CHECK(false, "push of unit {} without an open gradient buffer", unit);
}

void CollectiveComm::finish_reduce(GradSlot& slot) {
  if (slot.request == MPI_REQUEST_NULL) return;
  wait(slot.request, slot.unit, false);
  float* acc = store_.grad(slot.unit);
  const float* in = slot.received.data<float>();
  const std::int64_t n = store_.layout().unit(slot.unit).shard;
  for (std::int64_t i = 0; i < n; ++i) acc[i] += in[i];
}

void CollectiveComm::begin_minibatch() {
  store_.zero_grads();
  // The optimizer step just wrote the masters: no prefetched copy may survive into this minibatch.
  for (auto& w : weights_) {
    ODC_CHECK(!w.in_use && w.request == MPI_REQUEST_NULL, "weights of unit {} still held at minibatch start", w.unit);
    w.unit = -1;
  }
}

void CollectiveComm::end_minibatch() {
  in_end_ = true;
  for (auto& g : grads_) {
    ODC_CHECK(!g.open, "gradient of unit {} never pushed", g.unit);
    finish_reduce(g);
  }
  // A prefetch hint may have started a gather the model never acquired (e.g. the next unit after
  // the last backward); complete it so no request crosses the optimizer step.
  for (auto& w : weights_) {
    wait(w.request, w.unit, true);
    if (!w.in_use) w.unit = -1;
  }
  in_end_ = false;
}

void CollectiveComm::all_reduce_sum(std::span<double> values) {
  const Watchdog::Wait wait(watchdog_, "an all-reduce");
  MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_DOUBLE, MPI_SUM, comm_);
}

}  // namespace odc::distributed
