#pragma once
// LocalComm: a world of one rank. The shard is the whole unit, so acquire hands out the master
// weights themselves and the model accumulates straight into the gradient accumulator: no copies.
#include "odc/distributed/comm/comm.h"
#include "odc/distributed/shard/shard_store.h"

namespace odc::distributed {

class LocalComm final : public Comm {
 public:
  explicit LocalComm(ShardStore& store);
  std::string_view name() const override { return "local"; }
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  bool needs_equal_microbatches() const override { return false; }
  bool hands_out_masters() const override { return true; }
  void begin_minibatch() override;
  void end_minibatch() override {}
  const float* acquire(int unit) override { return store_.master(unit); }
  void release(int) override {}
  // odc::Error on a weights-only store (it serves forwards only: there is nothing to accumulate into).
  float* grad_buffer(int unit) override;
  void push_grad(int) override {}

 private:
  ShardStore& store_;
};

}  // namespace odc::distributed
