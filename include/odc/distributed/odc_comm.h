#pragma once
// OdcComm: On-Demand Communication. Parameters stay sharded exactly as in FSDP, but
//   gather  = this rank pulls every owner's shard of a unit with one-sided gets (the owners'
//             compute threads do nothing), prefetching the next unit while the current computes;
//   scatter-accumulate = this rank pushes each owner's slice of a unit's gradient; the owner's
//             progress thread adds it into its fp32 accumulator.
// No rank waits for another inside the microbatch loop, so ranks may run different numbers of
// microbatches. The only synchronization is at the minibatch boundaries:
//   begin_minibatch: zero accumulators, barrier (publishes the previous optimizer step);
//   end_minibatch:   exchange per-owner push counts, wait until this owner applied all of them.
// With `deterministic`, an owner applies pushes through an OrderedAccumulator (per-client
// buffers, each client's pushes in its order, folded in rank order): bitwise reproducible.
// The buffers and the protocol are the UnitBufferPool's; this class is the UCX transport.
#include <cstdint>
#include <memory>
#include <vector>

#include <mpi.h>

#include "odc/distributed/comm.h"
#include "odc/distributed/ordered_accumulator.h"
#include "odc/distributed/shard_store.h"
#include "odc/distributed/ucx_transport.h"
#include "odc/distributed/unit_buffer_pool.h"

namespace odc::distributed {

class Watchdog;

class OdcComm final : public ShardedComm {
 public:
  // `transport` must expose `store`'s master region (ShardStore built on transport.exposed());
  // `watchdog` (may be null) watches the minibatch-boundary MPI waits.
  OdcComm(ShardStore& store, UcxTransport& transport, MPI_Comm comm, Watchdog* watchdog, bool deterministic = false);
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

 private:
  // UnitTransport
  void start_gather(int unit, int buffer, float* full) override;
  bool gather_done(int buffer) override;
  void wait_gather(int unit, int buffer) override;
  void start_push(int unit, int buffer, const float* full) override;
  bool push_done(int buffer) override;
  void wait_push(int unit, int buffer) override;
  void accumulate(const PushHeader& header, const float* data);

  ShardStore& store_;
  UcxTransport& transport_;
  MPI_Comm comm_;
  Watchdog* watchdog_;
  std::vector<std::unique_ptr<Completion>> gathers_;  // per weight buffer
  std::vector<std::unique_ptr<Completion>> pushes_;   // per gradient buffer
  std::vector<std::int64_t> pushes_to_;               // messages sent to each owner this minibatch
  std::unique_ptr<OrderedAccumulator> ordered_;       // comm.deterministic only
  std::vector<std::int32_t> unit_pushes_;             // deterministic: pushes of each unit this minibatch
};

}  // namespace odc::distributed
