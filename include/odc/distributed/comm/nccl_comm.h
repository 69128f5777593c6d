#pragma once
// NcclComm: the FSDP / ZeRO-3 baseline on GPUs, CollectiveComm's twin over NCCL (built only with
// CUDA; nothing CUDA- or NCCL-typed here, so host-only code may include it). The shard store, the
// unit buffers and every transfer live in the memory of one CUDA backend; before a unit is used its
// full weights are all-gathered from every rank's master shard (again before its backward), after
// its backward its full gradient is reduce-scattered and each rank adds its slice into its fp32
// accumulator. Every gather and reduce-scatter is a collective: all ranks run the same number of
// microbatches (the trainer pads with empty ones), as with CollectiveComm.
//
// Streams. The model runs on the backend's compute stream; the collectives run in issue order on
// one comm stream of their own, ordered against the compute stream by events, so the host never
// blocks to start or finish a gather:
//   gather    the comm stream waits for the compute stream as it is now (the buffer's previous
//             readers, the optimizer's last update of the masters are before it), all-gathers this
//             rank's master shard into the unit buffer and records the buffer's event; acquire
//             makes the compute stream wait for that event (no host wait). With GatherDtype::bf16
//             a bf16 shadow of the master shards (cast on the compute stream at the minibatch
//             start) is gathered into a bf16 staging buffer and widened into the fp32 unit buffer
//             on the comm stream: half the bytes on the wire, the weights a bf16 model computes
//             with anyway.
//   push      the comm stream waits for the compute stream (the gradient is complete), reduce-
//             scatters it (fp32, sum) into this rank's received slice and records the buffer's
//             event. Reusing the buffer waits on the host (bounded, below) and orders the compute
//             stream after the event; the slice is then added into ShardStore::grad on the compute
//             stream, in the order the pool finishes pushes, so a run repeats bit for bit.
// The model's prefetch hint starts the next unit's all-gather while the current unit computes, and
// a gradient's reduce-scatter runs while the next unit's backward computes (UnitBufferPool).
//
// Start-up: the communicator is bootstrapped over the HostGroup (rank 0's ncclUniqueId broadcast
// as hex text) and created non-blocking, so a peer that never joins is a timeout, not a hang.
// Several ranks on ONE GPU cannot share a NCCL communicator (NCCL refuses duplicate devices): the
// ranks exchange their GPUs' UUIDs first and every rank fails with the same message naming them
// (train.comm=odc serves ranks that share a GPU through CUDA IPC).
//
// Errors and stalls. Every host-side wait (initialization, an enqueue NCCL reports in progress, a
// push's completion) polls the CUDA event and ncclCommGetAsyncError against a deadline of
// `timeout_s`; a NCCL error or the deadline aborts the communicator (its kernels stop) and throws
// odc::Error naming the rank, the operation and the unit, e.g. "rank 1: NCCL reduce-scatter of
// unit 3 (layer.2): ...". A stalled gather shows on the host at the next push wait (the comm
// stream runs in order). The destructor never throws: it aborts the communicator when an error was
// seen or transfers are unwaited, else finalizes and destroys it.
#include <memory>

#include "odc/backend/backend.h"
#include "odc/distributed/comm/comm.h"
#include "odc/distributed/group/host_group.h"
#include "odc/distributed/shard/shard_store.h"
#include "odc/distributed/comm/unit_buffer_pool.h"

namespace odc::distributed {

class NcclComm final : public ShardedComm {
 public:
  // `store` must be a device store of `device`, a backend on a CUDA device (odc::Error otherwise). `group` is
  // used during construction only (bootstrap); `timeout_s` bounds every host-side wait.
  NcclComm(ShardStore& store, HostGroup& group, backend::Backend& device, GatherDtype gather_dtype,
           double timeout_s);
  ~NcclComm() override;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  std::string_view name() const override { return "collective"; }
  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  bool needs_equal_microbatches() const override { return true; }
  // Zeroes the accumulators and refreshes the bf16 shadow of the masters (GatherDtype::bf16), on
  // the compute stream.
  void begin_minibatch() override;
  // Waits for every push (bounded) and orders the compute stream after every gather.
  void end_minibatch() override;
  GatherDtype gather_dtype() const { return gather_dtype_; }

 private:
  // UnitTransport
  void start_gather(int unit, int buffer, float* full) override;
  bool gather_done(int buffer) override;
  void wait_gather(int unit, int buffer) override;
  void start_push(int unit, int buffer, const float* full) override;
  bool push_done(int buffer) override;
  void wait_push(int unit, int buffer) override;
  void finish_push(int unit, int buffer) override;

  struct Impl;  // the communicator, the comm stream, the events and the staging buffers
  ShardStore& store_;
  GatherDtype gather_dtype_;
  int rank_ = 0;
  int world_size_ = 1;
  std::unique_ptr<Impl> impl_;
};

}  // namespace odc::distributed
