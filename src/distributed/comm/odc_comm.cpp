#include "odc/distributed/comm/odc_comm.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "odc/core/error.h"

namespace odc::distributed {

OdcComm::OdcComm(std::unique_ptr<UcxTransport> transport, std::unique_ptr<ShardStore> store, HostGroup& group,
                 bool deterministic)
    : ShardedComm(store->layout()),
      owned_transport_(std::move(transport)),
      owned_store_(std::move(store)),
      store_(*owned_store_),
      transport_(*owned_transport_),
      group_(group),
      ledger_(group),
      accumulator_(store_.layout(), store_.grad(0), deterministic, host_accumulator_memory()) {
  const auto& layout = store_.layout();
  if (layout.world_size() != transport_.world_size() || layout.rank() != transport_.rank() ||
      group.size() != transport_.world_size() || group.rank() != transport_.rank()) {
    fail("shard layout is for rank {} of {}, the group has rank {} of {}, the transport rank {} of {}", layout.rank(),
         layout.world_size(), group.rank(), group.size(), transport_.rank(), transport_.world_size());
  }
  ODC_CHECK(store_.master_base() == transport_.exposed().data(), "masters must live in the transport's exposed region");
  for (int i = 0; i < UnitBufferPool::kWeightBuffers; ++i) gathers_.push_back(std::make_unique<Completion>(layout.world_size()));
  for (int i = 0; i < UnitBufferPool::kGradBuffers; ++i) pushes_.push_back(std::make_unique<Completion>(layout.world_size()));
  unit_pushes_.assign(static_cast<std::size_t>(layout.num_units()), 0);
  // Runs on the progress thread, serially; the accumulator validates before it writes.
  transport_.set_receiver([this](const PushHeader& header, const float* data) {
    accumulator_.add(header.from, header.tag, header.sequence, header.offset, data, header.count);
    ledger_.applied(header.from, 1);
  });
}

OdcComm::~OdcComm() {
  // Operations still in flight reference our buffers; on an error path the transport is torn down
  // without waiting (see UcxTransport), otherwise everything completed in end_minibatch.
  transport_.set_receiver([](const PushHeader&, const float*) {});
}

CommResources OdcComm::resources() const {
  return {transport_.progress_cpu_seconds(), transport_.registered_bytes(), transport_.endpoints_created()};
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
  const std::int32_t sequence = unit_pushes_[static_cast<std::size_t>(unit)]++;
  for (int i = 0; i < layout.world_size(); ++i) {
    const int owner = (transport_.rank() + 1 + i) % layout.world_size();
    ledger_.sent(owner, transport_.push(owner, unit, 0, full + layout.shard_begin(unit, owner), shard,
                                        *pushes_[static_cast<std::size_t>(buffer)], sequence));
  }
}

bool OdcComm::push_done(int buffer) { return pushes_[static_cast<std::size_t>(buffer)]->done(); }

void OdcComm::wait_push(int unit, int buffer) {
  transport_.wait(*pushes_[static_cast<std::size_t>(buffer)], fmt::format("gradient push of unit {}", unit));
}

void OdcComm::begin_minibatch() {
  pool_.check_idle();
  transport_.check_failure("the minibatch start");
  store_.zero_grads();
  ledger_.begin();
  accumulator_.begin();
  std::fill(unit_pushes_.begin(), unit_pushes_.end(), 0);
  // Publishes every rank's optimizer step (no gather may read half-updated masters) and the
  // zeroed accumulators (no push may land before them).
  const auto start = std::chrono::steady_clock::now();
  group_.barrier("the minibatch-start barrier");
  pool_.waits().barrier_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void OdcComm::end_minibatch() {
  // This rank's own pushes and any prefetch the model never acquired (it must land before the
  // optimizer rewrites the masters).
  pool_.drain();
  const auto start = std::chrono::steady_clock::now();
  // Every owner learns how many messages each client sent it, then waits until it applied them all.
  const auto expected = ledger_.exchange("the minibatch-end exchange of push counts");
  {
    const UcxTransport::WaitScope waiting(transport_);
    PushLedger::Peers peers;
    peers.check_failure = [this] { transport_.check_failure("the minibatch-end wait for gradient pushes"); };
    ledger_.wait(expected, transport_.options().timeout_s, peers, "the minibatch-end wait for gradient pushes");
  }
  accumulator_.finish();  // every push is applied: the fold in rank order (deterministic)
  pool_.waits().barrier_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace odc::distributed
