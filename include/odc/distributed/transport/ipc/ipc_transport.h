#pragma once
// IpcTransport: the ODC transport between the ranks of one host through memory they share — GPU
// memory exported with CUDA IPC, or host shared memory (peer_memory.h). OdcComm runs the protocol
// over it (odc_transport.h); this moves the bytes:
//
//   gather   on the compute thread: the gather lane waits for the compute lane (the buffer's
//            previous users), copies every owner's piece into the unit buffer (fp32 masters, or
//            the bf16 shadows widened after the copy), and marks the end; the model's lane waits
//            for that mark (the host does not block). The owners do nothing.
//   push     the slot protocol (slot_protocol.h), its signals in the owners' mailboxes
//            (peer_mailbox.h): a job per gradient buffer for the progress thread, which copies each
//            chunk into a free data slot of this client at its owner on the push lane and posts it
//            once the copy completed; the buffer is reused once every chunk is posted.
//   serve    the progress thread hands each client's posted chunks to the receive handler in
//            order (the accumulator, whose adds run on the accumulate lane), and releases the slot
//            and reports the chunk applied once the add completed.
//
// A peer that does not take pushes is an error after comm.timeout_s naming it, the unit and the
// operation; a peer whose process has exited is named within about a second.
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

#include "odc/backend/backend.h"
#include "odc/distributed/group/host_group.h"
#include "odc/distributed/transport/ipc/ipc_buffers.h"
#include "odc/distributed/transport/ipc/peer_mailbox.h"
#include "odc/distributed/transport/ipc/peer_memory.h"
#include "odc/distributed/transport/odc_transport.h"
#include "odc/distributed/transport/slot_protocol.h"
#include "odc/distributed/transport/transport_options.h"

namespace odc::distributed {

class IpcTransport final : public OdcTransport {
 public:
  // Collective over `group` (every rank constructs its transport; the handles are exchanged here).
  // The ODC transports' one set of options: a data slot is comm.chunk_bytes, each client has
  // comm.max_inflight slots at each owner, every wait is bounded by comm.timeout_s, pushes come
  // from options.push_buffers gradient buffers. `device`: the
  // backend whose memory holds the unit buffers (null: host).
  IpcTransport(std::unique_ptr<PeerMemory> memory, HostGroup& group, const IpcShape& shape,
               const TransportOptions& options, backend::Backend* device = nullptr);
  ~IpcTransport() override;
  IpcTransport(const IpcTransport&) = delete;
  IpcTransport& operator=(const IpcTransport&) = delete;

  std::string_view name() const override { return "ipc"; }
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  void set_handlers(Handlers handlers) override;
  void detach() override;
  AccumulatorMemory& accumulator_memory() override { return *lanes_; }
  float* client_accumulators() override { return client_acc_; }
  void masters_changed() override;
  void start_gather(int buffer, std::span<const ShardPiece> pieces, float* full, std::int64_t padded) override;
  bool gather_done(int buffer) override;
  void wait_gather(int buffer, const std::string& what) override;
  void finish_gathers() override;
  void start_push(int buffer, int unit, std::int32_t sequence, std::span<const ShardPiece> pieces, const float* full,
                  std::vector<std::int64_t>& chunks) override;
  bool push_done(int buffer) override;
  void wait_push(int buffer, const std::string& what) override;
  void check_failure(std::string_view what) override;
  std::string describe_peer(int rank) const override;
  bool peer_gone(int rank) const override { return !mailbox_->alive(rank); }
  double timeout_s() const override { return timeout_s_; }
  TransportResources resources() const override;
  PlannedMemory allocated() const override;

  // Fault injection (tests): this owner's progress thread stops taking pushes, as a frozen
  // process would, while its memory stays mapped; its clients must name it after the timeout.
  void freeze_serving() { serving_.store(false); }

 private:
  void stop_progress();
  void progress_loop();
  void rethrow_failure() const;  // the progress thread's error, on the calling thread
  float* data_slot(int owner, int client, int slot) const;

  std::unique_ptr<PeerMemory> memory_;
  int slots_ = 1;         // data slots per client at each owner (comm.max_inflight)
  double timeout_s_ = 0;  // comm.timeout_s
  int rank_ = 0;
  int world_ = 1;
  std::int64_t owned_ = 0;
  std::int64_t slot_floats_ = 0;
  std::int64_t exported_bytes_ = 0;
  std::int64_t staging_bytes_ = 0;  // bf16 gathers' staging, all weight buffers

  const float* own_masters_ = nullptr;
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

  std::unique_ptr<LaneMark> compute_mark_;               // compute thread
  std::vector<std::unique_ptr<LaneMark>> gather_marks_;  // per weight buffer

  // The slot protocol (slot_protocol.h) over the mailbox: pushes and their serving.
  std::unique_ptr<SlotPusher> pusher_;
  std::unique_ptr<SlotServer> server_;

  // Shared with the progress thread (mutex_).
  mutable std::mutex mutex_;
  std::condition_variable changed_;  // wakes the progress thread
  std::exception_ptr failure_;
  bool stop_ = false;
  bool kicked_ = false;  // a push job came since the progress thread last looked

  Handlers handlers_;  // progress thread (set before it starts)
  std::atomic<bool> serving_{true};
  std::thread progress_;
};

}  // namespace odc::distributed
