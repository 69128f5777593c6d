#include "odc/distributed/odc_comm.h"

#include <chrono>

#include <fmt/format.h>

#include "odc/core/error.h"
#include "odc/distributed/watchdog.h"

namespace odc::distributed {

OdcComm::OdcComm(ShardStore& store, UcxTransport& transport, MPI_Comm comm, Watchdog* watchdog, bool deterministic)
    : ShardedComm(store.layout()), store_(store), transport_(transport), comm_(comm), watchdog_(watchdog) {
  const auto& layout = store.layout();
  if (layout.world_size() != transport.world_size() || layout.rank() != transport.rank()) {
    fail("shard layout is for rank {} of {}, but the transport has rank {} of {}", layout.rank(), layout.world_size(),
         transport.rank(), transport.world_size());
  }
  ODC_CHECK(store.master_base() == transport.exposed().data(), "masters must live in the transport's exposed region");
  for (int i = 0; i < UnitBufferPool::kWeightBuffers; ++i) gathers_.push_back(std::make_unique<Completion>(layout.world_size()));
  for (int i = 0; i < UnitBufferPool::kGradBuffers; ++i) pushes_.push_back(std::make_unique<Completion>(layout.world_size()));
  pushes_to_.assign(static_cast<std::size_t>(layout.world_size()), 0);
  if (deterministic) {
    ordered_ = std::make_unique<OrderedAccumulator>(layout);
    unit_pushes_.assign(static_cast<std::size_t>(layout.num_units()), 0);
  }
  transport_.set_receiver([this](const PushHeader& header, const float* data) { accumulate(header, data); });
}

OdcComm::~OdcComm() {
  // Operations still in flight reference our buffers; on an error path the transport is torn down
  // without waiting (see UcxTransport), otherwise everything completed in end_minibatch.
  transport_.set_receiver([](const PushHeader&, const float*) {});
}

CommResources OdcComm::resources() const {
  return {transport_.progress_cpu_seconds(), transport_.registered_bytes(), transport_.endpoints_created()};
}

void OdcComm::accumulate(const PushHeader& header, const float* data) {
  // Runs on the progress thread. Validate before writing: a corrupt header must not scribble.
  const auto& layout = store_.layout();
  if (header.tag < 0 || header.tag >= layout.num_units() || header.offset < 0 || header.count < 0 ||
      header.offset + header.count > layout.unit(header.tag).shard) {
    fail("rank {}: invalid gradient push from rank {} (unit {}, offset {}, count {})", transport_.rank(), header.from,
         header.tag, header.offset, header.count);
  }
  if (ordered_) {
    ordered_->add(header.from, header.tag, header.sequence, header.offset, data, header.count);
    return;
  }
  // The pushed slice never overlaps the accumulator (a slot or a receive buffer): vectorized.
  float* __restrict acc = store_.grad(header.tag) + header.offset;
  const float* __restrict in = data;
#pragma omp simd
  for (std::int64_t i = 0; i < header.count; ++i) acc[i] += in[i];
}

void OdcComm::start_gather(int unit, int buffer, float* full) {
  const auto& layout = store_.layout();
  const std::int64_t shard = layout.unit(unit).shard;
  // Start with the next owner and wrap, so that ranks do not all read from rank 0 first.
  for (int i = 0; i < layout.world_size(); ++i) {
    const int owner = (transport_.rank() + 1 + i) % layout.world_size();
    transport_.get(owner, store_.offset(unit), full + layout.shard_begin(unit, owner), shard,
                   *gathers_[static_cast<std::size_t>(buffer)]);
  }
}

bool OdcComm::gather_done(int buffer) { return gathers_[static_cast<std::size_t>(buffer)]->done(); }

void OdcComm::wait_gather(int unit, int buffer) {
  transport_.wait(*gathers_[static_cast<std::size_t>(buffer)], fmt::format("gather of unit {}", unit));
}

void OdcComm::start_push(int unit, int buffer, const float* full) {
  const auto& layout = store_.layout();
  const std::int64_t shard = layout.unit(unit).shard;
  const std::int32_t sequence = ordered_ ? unit_pushes_[static_cast<std::size_t>(unit)]++ : 0;
  for (int i = 0; i < layout.world_size(); ++i) {
    const int owner = (transport_.rank() + 1 + i) % layout.world_size();
    pushes_to_[static_cast<std::size_t>(owner)] +=
        transport_.push(owner, unit, 0, full + layout.shard_begin(unit, owner), shard,
                        *pushes_[static_cast<std::size_t>(buffer)], sequence);
  }
}

bool OdcComm::push_done(int buffer) { return pushes_[static_cast<std::size_t>(buffer)]->done(); }

void OdcComm::wait_push(int unit, int buffer) {
  transport_.wait(*pushes_[static_cast<std::size_t>(buffer)], fmt::format("gradient push of unit {}", unit));
}

void OdcComm::begin_minibatch() {
  pool_.check_idle();
  store_.zero_grads();
  transport_.reset_received();
  std::fill(pushes_to_.begin(), pushes_to_.end(), 0);
  if (ordered_) {
    ordered_->begin();
    std::fill(unit_pushes_.begin(), unit_pushes_.end(), 0);
  }
  // Publishes every rank's optimizer step (no gather may read half-updated masters) and the
  // zeroed accumulators (no push may land before them).
  const auto start = std::chrono::steady_clock::now();
  {
    const Watchdog::Wait wait(watchdog_, "the minibatch-start barrier");
    MPI_Barrier(comm_);
  }
  pool_.waits().barrier_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void OdcComm::end_minibatch() {
  // This rank's own pushes and any prefetch the model never acquired (it must land before the
  // optimizer rewrites the masters).
  pool_.drain();
  const auto start = std::chrono::steady_clock::now();
  // Every owner learns how many pushes each client sent it, then waits until it applied them all.
  std::vector<std::int64_t> expected(pushes_to_.size());
  {
    const Watchdog::Wait wait(watchdog_, "the minibatch-end exchange of push counts");
    MPI_Alltoall(pushes_to_.data(), 1, MPI_INT64_T, expected.data(), 1, MPI_INT64_T, comm_);
  }
  transport_.wait_received(expected, "the minibatch-end wait for gradient pushes");
  if (ordered_) ordered_->fold_into(store_.grad(0));  // every push is applied: the fold in rank order
  pool_.waits().barrier_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace odc::distributed
