#pragma once
// OdcTransport: what the ODC protocol (comm/odc_comm.h) needs of a transport, and nothing more.
// The protocol — which shard pieces a unit's gather reads, how a gradient is cut per owner, the
// push sequence numbers, the accumulation and deterministic fold (PushAccumulator), the
// minibatch-end count exchange and bounded wait (PushLedger), the boundaries' barriers — is written
// once, in OdcComm; a transport moves bytes:
//
//   gather   read pieces of the owners' exposed regions (their master shards) into a unit buffer,
//            one-sidedly: the owners' compute threads do nothing;
//   push     carry pieces of a gradient to their owners, in chunks (messages), and return how many
//            chunks each owner will count;
//   serve    on the owner, hand every received chunk to the receive handler, serially, in each
//            client's send order, and report the chunks whose adds completed (`applied`).
//
// Two implementations: UcxTransport (transport/ucx/: gets or request gathers, active messages,
// slots in the owner's region where it is mapped here) and IpcTransport (transport/ipc/: copies
// between one host's processes through peer memory, host shared memory or CUDA IPC, with a
// slot mailbox). Each drives its own progress thread; the handlers run on it.
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "odc/core/planned_memory.h"

namespace odc::distributed {

// Where an owner's adds run: on the calling thread for host memory, or issued on a device's lanes
// (the IPC transport's peer memory). The PushAccumulator writes through it.
class AccumulatorMemory {
 public:
  virtual ~AccumulatorMemory() = default;
  virtual void zero(float* dst, std::int64_t n) = 0;                   // at the minibatch start
  virtual void add(float* acc, const float* in, std::int64_t n) = 0;   // a chunk: acc[i] += in[i]
  virtual void fold(float* acc, const float* in, std::int64_t n) = 0;  // the minibatch-end fold, the same sum
  // Whether a chunk's bytes may be copied on the host (to hold one that came out of order).
  virtual bool host_visible() const = 0;
};

// Adds on the calling thread, in host memory.
AccumulatorMemory& host_accumulator_memory();

// Header of a pushed gradient chunk.
struct PushHeader {
  std::int32_t tag = 0;     // the unit
  std::int32_t from = 0;    // the client rank
  std::int64_t offset = 0;  // element offset inside the owner's shard of the unit
  std::int64_t count = 0;   // elements
  std::int32_t slot = -1;   // slot protocols: the client's slot holding the data; -1: payload attached
  std::int32_t sequence = 0;  // the client's push number for this unit this minibatch (comm.deterministic)
};

// One owner's piece of a unit: `count` elements at element `offset` of the owner's side (a gather:
// its exposed region; a push: its shard of the unit), at element `at` of the unit buffer.
struct ShardPiece {
  int peer = 0;
  std::int64_t offset = 0;
  std::int64_t at = 0;
  std::int64_t count = 0;
};

// What the transport holds of the machine (CommResources in the comm layer).
struct TransportResources {
  double thread_cpu_s = 0.0;
  std::int64_t registered_bytes = 0;
  int endpoints = 0;
};

class OdcTransport {
 public:
  // Run on the transport's progress thread, one at a time. `receive` adds a chunk (the data is
  // valid only during the call, or until its add completes on the accumulator memory's lanes);
  // `applied` reports `chunks` more of `client`'s chunks whose adds completed.
  struct Handlers {
    std::function<void(const PushHeader& header, const float* data)> receive;
    std::function<void(int client, std::int64_t chunks)> applied;
  };

  virtual ~OdcTransport() = default;
  virtual std::string_view name() const = 0;  // "ucx" | "ipc"
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Before the first push, once.
  virtual void set_handlers(Handlers handlers) = 0;
  // No handler runs once this returns (the owner of the handlers' state is going away).
  virtual void detach() = 0;
  // Where the owner's adds run, and the per-client accumulators of comm.deterministic there (null:
  // the accumulator allocates them on the host).
  virtual AccumulatorMemory& accumulator_memory() = 0;
  virtual float* client_accumulators() { return nullptr; }
  // The masters changed (the optimizer step, on the compute thread): whatever the transport derives
  // from them is refreshed and everything the compute thread issued has completed before this
  // returns (the minibatch-start barrier follows).
  virtual void masters_changed() {}

  // Gathers into unit buffer `buffer` (`padded` elements): every piece of `pieces`.
  virtual void start_gather(int buffer, std::span<const ShardPiece> pieces, float* full, std::int64_t padded) = 0;
  virtual bool gather_done(int buffer) = 0;
  // The model may read the buffer after this (on its device's order, or on the host).
  virtual void wait_gather(int buffer, const std::string& what) = 0;
  // No gather still reads a peer's region (the minibatch end).
  virtual void finish_gathers() {}

  // Pushes gradient buffer `buffer`'s pieces (each owner's slice of unit `unit`, the client's
  // `sequence`-th push of it this minibatch) once the compute that wrote it completed; adds the
  // chunks each owner will count to `chunks[owner]`.
  virtual void start_push(int buffer, int unit, std::int32_t sequence, std::span<const ShardPiece> pieces,
                          const float* full, std::vector<std::int64_t>& chunks) = 0;
  virtual bool push_done(int buffer) = 0;
  // The buffer may be rewritten after this. Bounded by timeout_s(), the error naming `what`.
  virtual void wait_push(int buffer, const std::string& what) = 0;

  // Throws odc::Error if the progress thread failed, naming `what`.
  virtual void check_failure(std::string_view what) = 0;
  // How to name `rank` in an error, and whether it is known to be gone (its process exited).
  virtual std::string describe_peer(int rank) const;
  virtual bool peer_gone(int rank) const { (void)rank; return false; }
  // The compute thread is blocked on the transport (between these two calls).
  virtual void compute_waits(bool waiting) { (void)waiting; }
  virtual double timeout_s() const = 0;
  virtual TransportResources resources() const = 0;
  // What it allocated, named as its planned buffers (ipc_buffers.h, ucx_buffers.h) name them.
  virtual PlannedMemory allocated() const { return {}; }
};

}  // namespace odc::distributed
