#pragma once
// OdcComm: On-Demand Communication, the protocol written once over any OdcTransport
// (transport/odc_transport.h: UCX, or peer memory on one host). Parameters stay sharded exactly as
// in FSDP, but
//   gather  = this rank reads every owner's shard of a unit one-sidedly (the owners' compute
//             threads do nothing), prefetching the next unit while the current computes;
//   scatter-accumulate = this rank pushes each owner's slice of a unit's gradient; the owner's
//             transport hands every chunk to the PushAccumulator on its progress thread.
// No rank waits for another inside the microbatch loop, so ranks may run different numbers of
// microbatches. The only synchronization is at the minibatch boundaries, over the HostGroup:
//   begin_minibatch: zero the accumulators, let the transport publish the masters (the optimizer
//                    step), barrier: no peer reads a master or pushes before that;
//   end_minibatch:   drain this rank's gathers and pushes, exchange the per-owner chunk counts,
//                    wait until this owner applied all of them (PushLedger), fold (deterministic:
//                    the clients' buffers in rank order, bitwise the same whatever the arrival
//                    order).
// The unit buffers and their protocol are the UnitBufferPool's (ShardedComm).
#include <cstdint>
#include <memory>
#include <vector>

#include "odc/distributed/comm/comm.h"
#include "odc/distributed/comm/push_accumulator.h"
#include "odc/distributed/comm/push_ledger.h"
#include "odc/distributed/comm/unit_buffer_pool.h"
#include "odc/distributed/group/host_group.h"
#include "odc/distributed/shard/shard_store.h"
#include "odc/distributed/transport/odc_transport.h"

namespace odc::distributed {

class OdcComm final : public ShardedComm {
 public:
  // Owns `transport` and `store`, whose masters live in memory the transport exposes to its peers;
  // `group` (the transport's) carries the minibatch-boundary barrier and count exchange. `device`:
  // the backend whose memory holds the unit buffers (null: host).
  OdcComm(std::unique_ptr<OdcTransport> transport, std::unique_ptr<ShardStore> store, HostGroup& group,
          bool deterministic = false, backend::Backend* device = nullptr);
  ~OdcComm() override;
  OdcComm(const OdcComm&) = delete;
  OdcComm& operator=(const OdcComm&) = delete;

  std::string_view name() const override { return "odc"; }
  int rank() const override { return transport_.rank(); }
  int world_size() const override { return transport_.world_size(); }
  bool needs_equal_microbatches() const override { return false; }
  void begin_minibatch() override;
  void end_minibatch() override;
  CommResources resources() const override;
  PlannedMemory allocated() const override;
  ShardStore& store() { return store_; }
  OdcTransport& transport() { return transport_; }

 private:
  // UnitTransport
  void start_gather(int unit, int buffer, float* full) override;
  bool gather_done(int buffer) override;
  void wait_gather(int unit, int buffer) override;
  void start_push(int unit, int buffer, const float* full) override;
  bool push_done(int buffer) override;
  void wait_push(int unit, int buffer) override;

  // Every owner's piece of `unit`, starting with the next owner and wrapping, so that ranks do not
  // all read from (or push to) rank 0 first. `offset`: in the owners' exposed regions (gathers) or
  // 0 (pushes: the whole shard).
  std::span<const ShardPiece> pieces(int unit, std::int64_t offset);

  // Destroyed after the members below, in this order: the store, then the memory it lives in.
  std::unique_ptr<OdcTransport> owned_transport_;
  std::unique_ptr<ShardStore> owned_store_;
  ShardStore& store_;
  OdcTransport& transport_;
  HostGroup& group_;
  PushLedger ledger_;
  PushAccumulator accumulator_;
  std::vector<std::int32_t> unit_pushes_;  // pushes of each unit this minibatch (the chunks' sequence)
  std::vector<ShardPiece> pieces_;         // compute thread
  std::vector<std::int64_t> sent_;         // compute thread: chunks of one push, per owner
};

}  // namespace odc::distributed
