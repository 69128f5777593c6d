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
#include <cstdint>
#include <memory>
#include <vector>

#include <mpi.h>

#include "odc/core/tensor.h"
#include "odc/distributed/comm.h"
#include "odc/distributed/shard_store.h"
#include "odc/distributed/ucx_transport.h"

namespace odc::distributed {

class OdcComm final : public Comm {
 public:
  // `transport` must expose `store`'s master region (ShardStore built on transport.exposed()).
  OdcComm(ShardStore& store, UcxTransport& transport, MPI_Comm comm);
  ~OdcComm() override;
  OdcComm(const OdcComm&) = delete;
  OdcComm& operator=(const OdcComm&) = delete;

  std::string_view name() const override { return "odc"; }
  int rank() const override { return transport_.rank(); }
  int world_size() const override { return transport_.world_size(); }
  void begin_minibatch() override;
  void end_minibatch() override;
  void all_reduce_sum(std::span<double> values) override;
  CommWaits waits() const override { return waits_; }
  double comm_thread_cpu_seconds() const override { return transport_.progress_cpu_seconds(); }

  const float* acquire(int unit) override;
  void release(int unit) override;
  void prefetch(int unit) override;
  float* grad_buffer(int unit) override;
  void push_grad(int unit) override;

 private:
  struct WeightSlot {
    Tensor buffer;
    std::unique_ptr<Completion> completion;
    int unit = -1;
    bool in_use = false;
    bool fetching = false;
  };
  struct GradSlot {
    Tensor buffer;
    std::unique_ptr<Completion> completion;
    int unit = -1;
    bool open = false;
    bool pushing = false;
  };
  WeightSlot& start_gather(int unit);
  WeightSlot* find_weights(int unit);
  void drain(GradSlot& slot);
  void timed_wait(Completion& completion, const std::string& what, int unit, bool gather);
  void accumulate(const PushHeader& header, const float* data);

  ShardStore& store_;
  UcxTransport& transport_;
  MPI_Comm comm_;
  std::vector<WeightSlot> weights_;
  std::vector<GradSlot> grads_;
  std::vector<std::int64_t> pushes_to_;  // chunks sent to each owner this minibatch
  CommWaits waits_;
};

}  // namespace odc::distributed
