#pragma once
// Comm: how a rank obtains full unit weights and hands off unit gradients when parameters are
// sharded. It is the model's ParamSource and GradSink. Implementations: LocalComm (one rank),
// CollectiveComm (all-gather / reduce-scatter per unit) and OdcComm (one-sided gather and
// push-accumulate); make_comm (comm_factory.h) builds the one a run asks for, and the trainer
// uses them interchangeably.
//
// Per minibatch:  begin_minibatch(); for each microbatch the model calls acquire/release/
// grad_buffer/push_grad; end_minibatch();  after which every owner's ShardStore::grad holds the sum
// of all ranks' gradients for its shard.
#include <cstdint>
#include <string_view>

#include "odc/core/planned_memory.h"
#include "odc/core/trace.h"
#include "odc/model/param_io.h"

namespace odc::distributed {

// The two sharded schedules a run can ask for (train.comm).
enum class CommKind { odc, collective };
CommKind parse_comm_kind(std::string_view name);  // "odc" | "collective", else odc::Error
std::string_view comm_kind_name(CommKind kind);
// The element type unit weights travel in between ranks (comm.gather_dtype): the fp32 masters
// themselves (the paper's reference gathers them under ODC and casts afterwards), or a bf16 copy
// of every shard refreshed at the minibatch start (half the bytes; the same weights wherever the
// model computes in bf16, which rounds them so anyway). Gradients always travel in fp32.
enum class GatherDtype { f32, bf16 };
GatherDtype parse_gather_dtype(std::string_view name);  // "fp32" | "bf16", else odc::Error
std::string_view gather_dtype_name(GatherDtype dtype);

// Whether `kind` needs every rank to run the same number of microbatches in a minibatch: the
// collective baseline's gathers and pushes are collectives, so a rank with fewer microbatches
// runs empty ones. A single rank communicates nothing and never does.
bool needs_equal_microbatches(CommKind kind, int world_size);

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

// What a comm holds of the machine, for the metrics (the long-run benchmark checks it stays flat).
struct CommResources {
  double thread_cpu_s = 0.0;          // CPU seconds of its communication thread, if it has one
  std::int64_t registered_bytes = 0;  // memory mapped and registered with the transport
  int endpoints = 0;                  // transport endpoints created
};

class Comm : public model::ParamSource, public model::GradSink {
 public:
  virtual std::string_view name() const = 0;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // True when every rank must run the same number of microbatches (see needs_equal_microbatches):
  // the trainer then pads short ranks with empty ones, and plans under per-microbatch barriers.
  virtual bool needs_equal_microbatches() const = 0;
  // Whether acquire() hands out the units' own storage (one rank: the masters), whose contents
  // change only at the optimizer step: a backend may then keep its compute copies across
  // acquires within a step (Backend::keep_weight_copies).
  virtual bool hands_out_masters() const { return false; }
  virtual void begin_minibatch() = 0;
  virtual void end_minibatch() = 0;
  virtual CommWaits waits() const { return {}; }
  virtual CommResources resources() const { return {}; }
  // What it allocated beyond the store's state, named as the memory plan's items for its choice
  // (comm_buffers.h: planned_buffers), which tests hold them to. The unit buffers grow to what
  // the model asked for so far.
  virtual PlannedMemory allocated() const { return {}; }
  // Waits that block are recorded as "wait" events (null: tracing off).
  virtual void set_tracer(Tracer* tracer) { (void)tracer; }
};

}  // namespace odc::distributed
