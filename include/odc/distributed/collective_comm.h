#pragma once
// CollectiveComm: the FSDP / ZeRO-3 baseline over MPI collectives. Before a unit is used its full
// weights are all-gathered from every rank's shard (again before its backward); after its backward
// its full gradient is reduce-scattered and each rank adds its slice into its fp32 accumulator.
// Every gather and reduce-scatter is a collective, i.e. a barrier per unit per microbatch: all
// ranks must run the same number of microbatches (the trainer pads with empty ones).
//
// Overlap: the model's prefetch hint starts the next unit's MPI_Iallgather while the current unit
// computes, and a gradient's MPI_Ireduce_scatter_block completes while the next unit's backward
// runs. Memory: full weights exist only for the units in use or in flight (at most 3 with tied
// embeddings), full gradients only for the unit being reduced and the one being computed.
#include <cstdint>
#include <vector>

#include <mpi.h>

#include "odc/core/tensor.h"
#include "odc/distributed/comm.h"
#include "odc/distributed/shard_store.h"

namespace odc::distributed {

class CollectiveComm final : public Comm {
 public:
  CollectiveComm(ShardStore& store, MPI_Comm comm);
  ~CollectiveComm() override;
  CollectiveComm(const CollectiveComm&) = delete;
  CollectiveComm& operator=(const CollectiveComm&) = delete;

  std::string_view name() const override { return "collective"; }
  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  void begin_minibatch() override;
  void end_minibatch() override;
  void all_reduce_sum(std::span<double> values) override;

  const float* acquire(int unit) override;
  void release(int unit) override;
  void prefetch(int unit) override;
  float* grad_buffer(int unit) override;
  void push_grad(int unit) override;

  CommWaits waits() const override { return waits_; }

 private:
  struct WeightSlot {
    Tensor buffer;
    int unit = -1;        // which unit the buffer holds (or is receiving)
    bool in_use = false;  // acquired and not yet released
    MPI_Request request = MPI_REQUEST_NULL;
  };
  struct GradSlot {
    Tensor buffer;
    Tensor received;  // this rank's reduced slice
    int unit = -1;
    bool open = false;  // handed out by grad_buffer, not yet pushed
    MPI_Request request = MPI_REQUEST_NULL;
  };
  WeightSlot& start_gather(int unit);
  WeightSlot* find_weights(int unit);
  void finish_reduce(GradSlot& slot);
  // Waits for a request of `unit`, attributing the time to gathers, pushes or (at the minibatch
  // end) the barrier.
  void wait(MPI_Request& request, int unit, bool gather);

  ShardStore& store_;
  MPI_Comm comm_;
  int rank_ = 0;
  int world_size_ = 1;
  std::vector<WeightSlot> weights_;
  std::vector<GradSlot> grads_;
  CommWaits waits_;
  bool in_end_ = false;  // attributes waits to the minibatch end
};

}  // namespace odc::distributed
