#pragma once
// Comm: how a rank obtains full unit weights and hands off unit gradients when parameters are
// sharded. It is the model's ParamSource and GradSink. Implementations: LocalComm (one rank),
// CollectiveComm (all-gather / reduce-scatter per unit) and OdcComm (one-sided gather and
// push-accumulate); the trainer uses them interchangeably.
//
// Per minibatch:  begin_minibatch(); for each microbatch the model calls acquire/release/
// grad_buffer/push_grad; end_minibatch();  after which every owner's ShardStore::grad holds the sum
// of all ranks' gradients for its shard.
#include <span>
#include <string_view>

#include "odc/model/param_io.h"

namespace odc::dist {

// Cumulative seconds the compute thread spent blocked on communication, split by where: inside
// the microbatch loop (waiting for a gather or for a gradient buffer to drain) and at the
// minibatch end (waiting for every rank's pushes / the last reductions).
struct CommWaits {
  double in_loop_s = 0.0;
  double minibatch_end_s = 0.0;
};

class Comm : public model::ParamSource, public model::GradSink {
 public:
  virtual std::string_view name() const = 0;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual void begin_minibatch() = 0;
  virtual void end_minibatch() = 0;
  // Element-wise sum over ranks, in place (grad norm, loss and token statistics).
  virtual void all_reduce_sum(std::span<double> values) = 0;
  virtual CommWaits waits() const { return {}; }
  // CPU seconds used by a communication thread of this rank (0 when there is none).
  virtual double comm_thread_cpu_seconds() const { return 0.0; }
};

}  // namespace odc::dist
