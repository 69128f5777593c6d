#pragma once
// OdcComm: On-Demand Communication over UCX. Parameters stay sharded exactly as in FSDP, but
//   gather  = this rank pulls every owner's shard of a unit with one-sided gets (the owners'
//             compute threads do nothing), prefetching the next unit while the current computes;
//   scatter-accumulate = this rank pushes each owner's slice of a unit's gradient; the owner's
//             progress thread applies it (PushAccumulator).
// No rank waits for another inside the microbatch loop, so ranks may run different numbers of
// microbatches. The only synchronization is at the minibatch boundaries, over the HostGroup:
//   begin_minibatch: zero accumulators, barrier (publishes the previous optimizer step);
//   end_minibatch:   exchange per-owner push counts, wait until this owner applied all of them
//                    (PushLedger), fold (deterministic).
// The accounting, the accumulation and the deterministic fold are the IPC transport's too
// (ipc_odc_comm.h); the buffers and their protocol are the UnitBufferPool's; this class drives the
// UCX transport.
#include <cstdint>
#include <memory>
#include <vector>

#include "odc/distributed/comm/comm.h"
#include "odc/distributed/group/host_group.h"
#include "odc/distributed/comm/push_accumulator.h"
#include "odc/distributed/comm/push_ledger.h"
#include "odc/distributed/shard/shard_store.h"
#include "odc/distributed/transport/ucx/ucx_transport.h"
#include "odc/distributed/comm/unit_buffer_pool.h"

namespace odc::distributed {

class OdcComm final : public ShardedComm {
 public:
  // Owns `transport` and `store`, whose masters live in the transport's exposed region (a ShardStore
  // built on transport->exposed()); `group` (the transport's) carries the minibatch-boundary
  // barrier and count exchange.
  OdcComm(std::unique_ptr<UcxTransport> transport, std::unique_ptr<ShardStore> store, HostGroup& group,
          bool deterministic = false);
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
  ShardStore& store() { return store_; }

 private:
  // UnitTransport
  void start_gather(int unit, int buffer, float* full) override;
  bool gather_done(int buffer) override;
  void wait_gather(int unit, int buffer) override;
  void start_push(int unit, int buffer, const float* full) override;
  bool push_done(int buffer) override;
  void wait_push(int unit, int buffer) override;

  // Destroyed after the members below, in this order: the store, then the memory it lives in.
  std::unique_ptr<UcxTransport> owned_transport_;
  std::unique_ptr<ShardStore> owned_store_;
  ShardStore& store_;
  UcxTransport& transport_;
  HostGroup& group_;
  std::vector<std::unique_ptr<Completion>> gathers_;  // per weight buffer
  std::vector<std::unique_ptr<Completion>> pushes_;   // per gradient buffer
  PushLedger ledger_;
  PushAccumulator accumulator_;
  std::vector<std::int32_t> unit_pushes_;  // pushes of each unit this minibatch (the chunks' sequence)
};

}  // namespace odc::distributed
