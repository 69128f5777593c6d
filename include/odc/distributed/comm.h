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

#include "odc/core/trace.h"
#include "odc/model/param_io.h"

namespace odc::distributed {

class Watchdog;

// Cumulative seconds the compute thread spent blocked on communication, split by what it waited
// for: inside the microbatch loop a gather (weights not there yet) or a gradient push (a gradient
// buffer still draining); at the minibatch boundaries the barrier (every rank's pushes applied,
// the last reductions, the start-of-minibatch synchronization).
struct CommWaits {
  double gather_s = 0.0;
  double push_s = 0.0;
  double barrier_s = 0.0;
  double in_loop_s() const { return gather_s + push_s; }
  double total_s() const { return gather_s + push_s + barrier_s; }
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
  // Waits that block are recorded as "wait" events (null: tracing off).
  void set_tracer(Tracer* tracer) { tracer_ = tracer; }
  // MPI waits run under this watchdog (null: unwatched), which names unresponsive peers.
  void set_watchdog(Watchdog* watchdog) { watchdog_ = watchdog; }

 protected:
  Tracer* tracer_ = nullptr;
  Watchdog* watchdog_ = nullptr;
};

}  // namespace odc::distributed
