#pragma once
// The comms of the layouts that know hosts (train.sharding, sharding.h), each built from the
// ordinary comms of one group and never seen as different by the model or the trainer:
//
//   HybridComm  a comm over the ranks of one host (any kind: ODC or collective) whose shards are
//               replicated on every host; end_minibatch sums each shard's gradient across the
//               replicas (one MPI all-reduce over the ranks with the same local index), so every
//               replica's optimizer takes the same step on the same sums.
//   HpzComm     the world's comm (primary shards: accumulators, optimizer state, checkpoints) and a
//               comm over the ranks of one host whose store holds a secondary copy of the weights,
//               sharded within the host. begin_minibatch refreshes that copy from the primary
//               shards (one gather of every unit through the world's comm, keeping this rank's
//               slice), then the host's comm publishes it; the minibatch's gathers are served by
//               the host comm, its gradients pushed through the world comm.
//
// Both hold host state (the replica sum runs over MPI on host memory, the refresh copies host
// memory): a GPU run uses train.sharding full.
#include <mpi.h>

#include "odc/distributed/comm/comm.h"
#include "odc/distributed/shard/shard_store.h"

namespace odc::distributed {

class Watchdog;

class HybridComm final : public Comm {
 public:
  // `inner` runs over one host's ranks on `store`; `replicas` joins the ranks holding the same
  // shards on the other hosts. `watchdog` (may be null) watches the all-reduce.
  HybridComm(Comm& inner, ShardStore& store, MPI_Comm replicas, Watchdog* watchdog);

  std::string_view name() const override { return inner_.name(); }
  int rank() const override { return inner_.rank(); }
  int world_size() const override { return inner_.world_size(); }
  bool needs_equal_microbatches() const override { return inner_.needs_equal_microbatches(); }
  void begin_minibatch() override { inner_.begin_minibatch(); }
  void end_minibatch() override;
  CommWaits waits() const override;
  CommResources resources() const override { return inner_.resources(); }
  void set_tracer(Tracer* tracer) override;

  const float* acquire(int unit) override { return inner_.acquire(unit); }
  void release(int unit) override { inner_.release(unit); }
  void prefetch(int unit) override { inner_.prefetch(unit); }
  float* grad_buffer(int unit) override { return inner_.grad_buffer(unit); }
  void push_grad(int unit) override { inner_.push_grad(unit); }

 private:
  Comm& inner_;
  ShardStore& store_;
  MPI_Comm replicas_;
  Watchdog* watchdog_;
  Tracer* tracer_ = nullptr;
  double replica_sum_s_ = 0.0;  // time in the replica all-reduce (counted as barrier waiting)
};

class HpzComm final : public Comm {
 public:
  // `primary` over the world on `primary_store`; `secondary` over this rank's host on
  // `secondary_store` (its masters are overwritten at every minibatch start).
  HpzComm(Comm& primary, ShardStore& primary_store, Comm& secondary, ShardStore& secondary_store);

  std::string_view name() const override { return primary_.name(); }
  int rank() const override { return primary_.rank(); }
  int world_size() const override { return primary_.world_size(); }
  bool needs_equal_microbatches() const override {
    return primary_.needs_equal_microbatches() || secondary_.needs_equal_microbatches();
  }
  void begin_minibatch() override;
  void end_minibatch() override;
  CommWaits waits() const override;
  CommResources resources() const override;
  void set_tracer(Tracer* tracer) override;

  const float* acquire(int unit) override { return secondary_.acquire(unit); }
  void release(int unit) override { secondary_.release(unit); }
  void prefetch(int unit) override { secondary_.prefetch(unit); }
  float* grad_buffer(int unit) override { return primary_.grad_buffer(unit); }
  void push_grad(int unit) override { primary_.push_grad(unit); }

 private:
  Comm& primary_;
  ShardStore& primary_store_;
  Comm& secondary_;
  ShardStore& secondary_store_;
  Tracer* tracer_ = nullptr;
  double refresh_s_ = 0.0;         // time refreshing the secondary copy (counted as barrier waiting)
  double refresh_gather_s_ = 0.0;  // the primary's gather waits inside it (not counted twice)
};

}  // namespace odc::distributed
