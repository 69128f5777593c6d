#include "odc/distributed/comm/odc_comm.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "odc/core/error.h"

namespace odc::distributed {

OdcComm::OdcComm(std::unique_ptr<OdcTransport> transport, std::unique_ptr<ShardStore> store, HostGroup& group,
                 bool deterministic, backend::Backend* device)
    : ShardedComm(store->layout(), device),
      owned_transport_(std::move(transport)),
      owned_store_(std::move(store)),
      store_(*owned_store_),
      transport_(*owned_transport_),
      group_(group),
      ledger_(group),
      accumulator_(store_.layout(), store_.grad(0), deterministic, transport_.accumulator_memory(),
                   transport_.client_accumulators()) {
  const auto& layout = store_.layout();
  if (layout.world_size() != transport_.world_size() || layout.rank() != transport_.rank() ||
      group.size() != transport_.world_size() || group.rank() != transport_.rank()) {
    fail("shard layout is for rank {} of {}, the group has rank {} of {}, the transport rank {} of {}", layout.rank(),
         layout.world_size(), group.rank(), group.size(), transport_.rank(), transport_.world_size());
  }
  unit_pushes_.assign(static_cast<std::size_t>(layout.num_units()), 0);
  sent_.assign(static_cast<std::size_t>(layout.world_size()), 0);
  // Run on the transport's progress thread, serially; the accumulator validates before it writes.
  OdcTransport::Handlers handlers;
  handlers.receive = [this](const PushHeader& header, const float* data) {
    accumulator_.add(header.from, header.tag, header.sequence, header.offset, data, header.count);
  };
  handlers.applied = [this](int client, std::int64_t chunks) { ledger_.applied(client, chunks); };
  transport_.set_handlers(std::move(handlers));
}

OdcComm::~OdcComm() {
  // Operations still in flight reference our buffers and the accumulator; on an error path the
  // transport is torn down without waiting, otherwise everything completed in end_minibatch.
  transport_.detach();
}

PlannedMemory OdcComm::allocated() const {
  PlannedMemory m;
  m.add("unit buffers", pool_.allocated_floats() * static_cast<std::int64_t>(sizeof(float)), "allocated");
  m.append(transport_.allocated());
  if (accumulator_.own_bytes() > 0) m.add("deterministic accumulator", accumulator_.own_bytes(), "allocated");
  return m;
}

CommResources OdcComm::resources() const {
  const TransportResources r = transport_.resources();
  return {r.thread_cpu_s, r.registered_bytes, r.endpoints};
}

std::span<const ShardPiece> OdcComm::pieces(int unit, std::int64_t offset) {
  const auto& layout = store_.layout();
  const std::int64_t shard = layout.unit(unit).shard;
  pieces_.clear();
  for (int i = 0; i < layout.world_size(); ++i) {
    const int owner = (layout.rank() + 1 + i) % layout.world_size();
    pieces_.push_back({owner, offset, layout.shard_begin(unit, owner), shard});
  }
  return pieces_;
}

void OdcComm::start_gather(int unit, int buffer, float* full) {
  transport_.start_gather(buffer, pieces(unit, store_.offset(unit)), full, store_.layout().unit(unit).padded);
}

bool OdcComm::gather_done(int buffer) { return transport_.gather_done(buffer); }

void OdcComm::wait_gather(int unit, int buffer) { transport_.wait_gather(buffer, fmt::format("gather of unit {}", unit)); }

void OdcComm::start_push(int unit, int buffer, const float* full) {
  const std::int32_t sequence = unit_pushes_[static_cast<std::size_t>(unit)]++;
  std::fill(sent_.begin(), sent_.end(), 0);
  transport_.start_push(buffer, unit, sequence, pieces(unit, 0), full, sent_);
  for (int owner = 0; owner < store_.layout().world_size(); ++owner) ledger_.sent(owner, sent_[static_cast<std::size_t>(owner)]);
}

bool OdcComm::push_done(int buffer) { return transport_.push_done(buffer); }

void OdcComm::wait_push(int unit, int buffer) {
  transport_.wait_push(buffer, fmt::format("gradient push of unit {}", unit));
}

void OdcComm::begin_minibatch() {
  pool_.check_idle();
  transport_.check_failure("the minibatch start");
  store_.zero_grads();
  accumulator_.begin();  // the clients' buffers, zeroed where the adds run
  ledger_.begin();
  std::fill(unit_pushes_.begin(), unit_pushes_.end(), 0);
  const auto start = std::chrono::steady_clock::now();
  // Every rank's optimizer step and the zeroed accumulators are complete and published before any
  // peer reads a master (none may read half-updated masters) or pushes a chunk.
  transport_.masters_changed();
  group_.barrier("the minibatch-start barrier");
  pool_.waits().barrier_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void OdcComm::end_minibatch() {
  // This rank's own pushes and any prefetch the model never acquired (it must land before the
  // optimizer rewrites the masters).
  pool_.drain();
  const auto start = std::chrono::steady_clock::now();
  transport_.finish_gathers();  // no copy still reads a peer's masters
  // Every owner learns how many chunks each client sent it, then waits until it applied them all.
  const auto expected = ledger_.exchange("the minibatch-end exchange of push counts");
  {
    transport_.compute_waits(true);
    struct Done {
      OdcTransport& t;
      ~Done() { t.compute_waits(false); }
    } done{transport_};
    PushLedger::Peers peers;
    peers.check_failure = [this] { transport_.check_failure("the minibatch-end wait for gradient pushes"); };
    peers.describe = [this](int r) { return transport_.describe_peer(r); };
    peers.gone = [this](int r) { return transport_.peer_gone(r); };
    ledger_.wait(expected, transport_.timeout_s(), peers, "the minibatch-end wait for gradient pushes");
  }
  // Every chunk's add has completed (a transport reports a chunk applied once its add did): the
  // fold reads finished sums.
  accumulator_.finish();
  pool_.waits().barrier_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace odc::distributed
