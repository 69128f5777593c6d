#pragma once
// IpcOdcComm: On-Demand Communication between the ranks of one host through memory they share —
// GPU memory exported with CUDA IPC, or host shared memory (peer_memory.h) — with the same
// semantics as the UCX OdcComm: gathers read the owners' shards one-sidedly (the owners do
// nothing), gradient slices are pushed to their owners, whose progress thread adds them into the
// fp32 accumulator; ranks meet only at the minibatch boundaries.
//
//   gather   on the compute thread: the gather lane waits for the compute lane (the buffer's
//            previous users), copies every owner's shard of the unit into the unit buffer (fp32
//            masters, or the bf16 shadows widened after the copy), and marks the end; the model's
//            lane waits for that mark (the host does not block).
//   push     a job per gradient buffer for the progress thread: after the compute lane's mark
//            (gradient complete), each owner's slice is cut in chunks of `chunk_floats`; a chunk
//            is copied into a free data slot of this client at its owner, and posted in the
//            owner's mailbox once the copy completed (peer_mailbox.h). The buffer is reused once
//            every chunk is posted.
//   serve    the progress thread takes each client's posted chunks in order, hands them to the
//            PushAccumulator (the UCX OdcComm's too), whose adds run on the accumulate lane, and
//            releases the slot once the add completed.
//   begin_minibatch  zero the accumulators, refresh the bf16 shadows, finish the compute lane
//            (the optimizer step), barrier: no peer reads a master or pushes before that.
//   end_minibatch    drain this rank's gathers and pushes, exchange the chunk counts and wait
//            until every client's chunks are applied (PushLedger, as the UCX OdcComm);
//            deterministic: fold the per-client accumulators in rank order (bitwise the same
//            result whatever the arrival order).
//
// A peer that does not take pushes, or does not send the chunks it counted, is an error after
// `timeout_s` naming it, the unit and the operation; a peer whose process has exited is named
// within about a second.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "odc/distributed/comm/comm.h"
#include "odc/distributed/group/host_group.h"
#include "odc/distributed/transport/ipc/peer_mailbox.h"
#include "odc/distributed/transport/ipc/peer_memory.h"
#include "odc/distributed/comm/push_accumulator.h"
#include "odc/distributed/comm/push_ledger.h"
#include "odc/distributed/shard/shard_store.h"
#include "odc/distributed/transport/transport_options.h"
#include "odc/distributed/comm/unit_buffer_pool.h"

namespace odc::distributed {

class IpcOdcComm final : public ShardedComm {
 public:
  // Owns `memory` and `store`, whose masters live in `memory`'s region exported as `master_handle`
  // (collective: every rank of `group` constructs its comm; the handles are exchanged here).
  // The ODC transports' one set of options: a pushed chunk (a data slot) is comm.chunk_bytes,
  // each client has comm.max_inflight slots at each owner, every wait is bounded by
  // comm.timeout_s. `device`: the backend whose memory holds the unit buffers (null: host).
  IpcOdcComm(std::unique_ptr<PeerMemory> memory, std::unique_ptr<ShardStore> store, HostGroup& group,
             const std::string& master_handle, const TransportOptions& transport, GatherDtype gather_dtype,
             bool deterministic, backend::Backend* device = nullptr);
  ~IpcOdcComm() override;
  IpcOdcComm(const IpcOdcComm&) = delete;
  IpcOdcComm& operator=(const IpcOdcComm&) = delete;

  std::string_view name() const override { return "odc"; }
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  bool needs_equal_microbatches() const override { return false; }
  void begin_minibatch() override;
  void end_minibatch() override;
  CommResources resources() const override;
  ShardStore& store() { return store_; }

  // Fault injection (tests): this owner's progress thread stops taking pushes, as a frozen
  // process would, while its memory stays mapped; its clients must name it after the timeout.
  void freeze_serving() { serving_.store(false); }

 private:
  struct Chunk {
    int owner;
    std::int64_t offset;  // into the owner's shard
    std::int64_t count;
    const float* source;
    bool issued = false;
  };
  struct PushJob {
    int unit = -1;
    std::int32_t sequence = 0;
    std::unique_ptr<LaneMark> ready;  // the gradient is complete on the compute lane
    std::vector<Chunk> chunks;
    bool started = false;
    std::size_t posted = 0;
    bool done = true;
    double stalled_since = -1.0;  // steady seconds since a chunk found no free slot; -1: not stalled
  };
  struct Pending {  // a chunk copied (or being copied) into slot `slot` at its owner
    int slot;
    PeerMailbox::Message message;
    int job;
  };

  // UnitTransport
  void start_gather(int unit, int buffer, float* full) override;
  bool gather_done(int buffer) override;
  void wait_gather(int unit, int buffer) override;
  void start_push(int unit, int buffer, const float* full) override;
  bool push_done(int buffer) override;
  void wait_push(int unit, int buffer) override;

  void progress_loop();
  bool serve_incoming();  // progress thread, owner side
  bool advance_pushes();  // progress thread, client side
  void check_failure() const;  // rethrows the progress thread's error on the calling thread
  float* data_slot(int owner, int client, int slot) const;
  std::string peer_state(int rank) const;

  // Destroyed after the members below, in this order: the store, then the memory it lives in.
  std::unique_ptr<PeerMemory> owned_memory_;
  std::unique_ptr<ShardStore> owned_store_;
  ShardStore& store_;
  HostGroup& group_;
  PeerMemory& memory_;
  int slots_ = 1;         // data slots per client at each owner (comm.max_inflight)
  double timeout_s_ = 0;  // comm.timeout_s
  int rank_ = 0;
  int world_ = 1;
  std::int64_t slot_floats_ = 0;
  std::int64_t exported_bytes_ = 0;

  std::vector<const float*> masters_;          // per owner
  std::vector<const std::uint16_t*> shadows_;  // per owner (bf16 gathers)
  std::vector<float*> slots_of_;               // per owner: its data slots, [client][slot][slot_floats]
  std::uint16_t* own_shadow_ = nullptr;
  std::vector<backend::Buffer> gather_staging_;  // bf16 gathers: per weight buffer
  std::vector<std::vector<std::uint16_t>> host_staging_;  // the same in host memory
  std::vector<std::uint16_t*> staging_;
  float* client_acc_ = nullptr;  // deterministic: [client][owned]
  std::unique_ptr<PeerMailbox> mailbox_;
  std::unique_ptr<AccumulatorMemory> lanes_;  // the accumulator's adds, on this memory's lanes
  std::unique_ptr<PushAccumulator> accumulator_;  // progress thread (and the minibatch boundaries)
  PushLedger ledger_;

  std::unique_ptr<LaneMark> compute_mark_;                  // compute thread
  std::vector<std::unique_ptr<LaneMark>> gather_marks_;     // per weight buffer
  std::vector<std::int32_t> unit_pushes_;                   // per unit, this minibatch

  // Shared with the progress thread (mutex_).
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<PushJob> jobs_;        // per gradient buffer
  std::deque<int> job_order_;        // active jobs in submission order
  std::exception_ptr failure_;
  bool stop_ = false;

  // Progress thread only.
  std::vector<std::vector<std::unique_ptr<LaneMark>>> copy_marks_;  // [owner][slot]
  std::vector<std::deque<Pending>> pending_;                        // per owner
  std::vector<std::int64_t> next_slot_;                             // per owner: ring position
  std::vector<std::vector<std::unique_ptr<LaneMark>>> add_marks_;   // [client][slot]
  std::vector<std::int64_t> served_head_, served_next_;             // per client: ring positions
  std::atomic<bool> serving_{true};
  std::thread progress_;
};

}  // namespace odc::distributed
