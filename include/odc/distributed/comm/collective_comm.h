#pragma once
// CollectiveComm: the FSDP / ZeRO-3 baseline over MPI collectives. Before a unit is used its full
// weights are all-gathered from every rank's shard (again before its backward); after its backward
// its full gradient is reduce-scattered and each rank adds its slice into its fp32 accumulator.
// Every gather and reduce-scatter is a collective, i.e. a barrier per unit per microbatch: all
// ranks must run the same number of microbatches (the trainer pads with empty ones).
//
// Overlap: the model's prefetch hint starts the next unit's MPI_Iallgather while the current unit
// computes, and a gradient's MPI_Ireduce_scatter_block completes while the next unit's backward
// runs. The buffers and the protocol are the UnitBufferPool's; this class is the MPI transport.
#include <vector>

#include <mpi.h>

#include "odc/core/tensor.h"
#include "odc/distributed/comm/comm.h"
#include "odc/distributed/shard/shard_store.h"
#include "odc/distributed/comm/unit_buffer_pool.h"

namespace odc::distributed {

class Watchdog;

class CollectiveComm final : public ShardedComm {
 public:
  // `watchdog` (may be null) watches every MPI wait.
  CollectiveComm(ShardStore& store, MPI_Comm comm, Watchdog* watchdog);
  ~CollectiveComm() override;
  CollectiveComm(const CollectiveComm&) = delete;
  CollectiveComm& operator=(const CollectiveComm&) = delete;

  std::string_view name() const override { return "collective"; }
  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  bool needs_equal_microbatches() const override { return true; }
  void begin_minibatch() override;
  void end_minibatch() override;
  PlannedMemory allocated() const override;

 private:
  // UnitTransport
  void start_gather(int unit, int buffer, float* full) override;
  bool gather_done(int buffer) override;
  void wait_gather(int unit, int buffer) override;
  void start_push(int unit, int buffer, const float* full) override;
  bool push_done(int buffer) override;
  void wait_push(int unit, int buffer) override;
  void finish_push(int unit, int buffer) override;

  ShardStore& store_;
  MPI_Comm comm_;
  Watchdog* watchdog_;
  int rank_ = 0;
  int world_size_ = 1;
  std::vector<MPI_Request> gathers_;   // per weight buffer
  std::vector<MPI_Request> pushes_;    // per gradient buffer
  std::vector<Tensor> received_;       // per gradient buffer: this rank's reduced slice
};

}  // namespace odc::distributed
