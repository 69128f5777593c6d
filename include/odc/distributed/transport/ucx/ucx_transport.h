#pragma once
// UcxTransport: the one-sided machinery under OdcComm, over UCX (ucp) bootstrapped over the job's
// HostGroup (MPI processes, one host's processes under odc-run --local, or threads of one process).
//
// * Each rank exposes one region (its master shards) allocated by UCX itself (ucp_mem_map with
//   UCP_MEM_MAP_ALLOCATE): on shared memory, gets from such memory complete without any action of
//   the owner, like reads from the paper's symmetric heap. Base addresses and packed remote keys
//   are all-gathered at start.
// * get(): a read of a peer's region, in chunks with several in flight, by one of two protocols
//   chosen per peer (comm.gather_protocol; docs/comms.md, "Why these protocols", says why):
//   - get: one-sided ucp_get (a plain copy where the peer's region is mapped here);
//   - request: a small active message asks the owner's progress thread, which answers with the
//     bytes as active-message payload (rendezvous, received straight into the destination);
//     the owner's compute thread is not involved. UCX emulates gets over TCP in software, slowly.
// * pushes of a gradient's pieces to their owners, whose progress thread hands each to the handlers
//   (accumulation) and counts it. Two protocols (docs/comms.md, "Why these protocols", says why):
//   - slot (start_push, where the owner's region is mapped here: shared memory, and slots are
//     configured): the slot protocol written once for every transport (slot_protocol.h): the
//     progress thread copies the slice into this client's next free slot in the owner's region and
//     posts it with a small active message; the owner's progress thread adds from the slot and
//     acks with another; a slot is rewritten only after its ack;
//   - message (push(), and start_push to any other peer): the slice travels as active-message
//     payload, in chunks.
// * One progress thread owns the UCX worker: it issues what the compute thread queues and serves
//   incoming pushes. Idle, it sleeps on the worker's event fd (and an eventfd the compute thread
//   signals), so it does not take the core the compute thread needs.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "odc/distributed/group/host_group.h"
#include "odc/distributed/transport/ipc/peer_memory.h"
#include "odc/distributed/transport/odc_transport.h"
#include "odc/distributed/transport/slot_protocol.h"
#include "odc/distributed/transport/transport_options.h"

namespace odc::distributed {


// Tracks a group of operations (e.g. every chunk of one unit's gather); the compute thread waits
// for it. Must outlive its operations.
class Completion {
 public:
  explicit Completion(int world_size);
  bool done() const { return pending_.load(std::memory_order_acquire) == 0; }

 private:
  friend class UcxTransport;
  std::atomic<std::int64_t> pending_{0};
  std::unique_ptr<std::atomic<std::int32_t>[]> per_peer_;
  int world_size_;
  std::string error_;  // guarded by the transport's mutex
};

class UcxTransport final : public OdcTransport {
 public:
  // Called on the progress thread for every received push, serially (the protocol above counts
  // and applies it: PushLedger, PushAccumulator).
  using Receiver = std::function<void(const PushHeader& header, const float* data)>;

  // Collective over `group` (which must outlive the transport). Exposes `exposed_floats` floats of
  // UCX-allocated memory (followed by the client slots, when options.slot_floats > 0).
  UcxTransport(HostGroup& group, std::int64_t exposed_floats, TransportOptions options);
  ~UcxTransport() override;  // collective (barriers around the shutdown)
  UcxTransport(const UcxTransport&) = delete;
  UcxTransport& operator=(const UcxTransport&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::span<float> exposed() { return {exposed_, static_cast<std::size_t>(exposed_floats_)}; }
  const TransportOptions& options() const { return options_; }
  void set_receiver(Receiver receiver);
  // The protocol get() uses for `peer` (comm.gather_protocol with auto resolved).
  GatherProtocol gather_protocol(int peer) const { return gather_protocols_[static_cast<std::size_t>(peer)]; }
  // Switches every peer's protocol (auto resolved per peer as at construction). Compute thread,
  // with no gather in flight (tests and benchmarks compare the protocols on one transport).
  void set_gather_protocol(GatherProtocol protocol);
  // Whether `peer`'s region is mapped into our address space (shared memory).
  bool mapped(int peer) const { return mappable_[static_cast<std::size_t>(peer)]; }

  // Reads `count` floats at element `offset` of `peer`'s exposed region into `dest`. Where the
  // peer's region is mapped locally (shared memory) this copies at once, on the calling thread.
  void get(int peer, std::int64_t offset, float* dest, std::int64_t count, Completion& completion);
  // Sends `count` floats from `src` to `peer`'s receiver as message pushes (payload). `src` must
  // stay valid until completion.
  // Returns the number of messages the receiver will count for it.
  // `sequence` travels in the header (PushHeader::sequence).
  std::int64_t push(int peer, std::int32_t tag, std::int64_t offset, const float* src, std::int64_t count,
                    Completion& completion, std::int32_t sequence = 0);
  // Blocks until `completion` is done; after options().timeout_s throws odc::Error naming `what`
  // and the peers whose operations are outstanding.
  void wait(Completion& completion, const std::string& what);

  // Throws odc::Error if the transport failed (a malformed message, a failed receive), naming `what`.
  void check_failure(std::string_view what) override;
  // Marks the calling compute thread as blocked on the transport for its lifetime (over the
  // network the progress thread then keeps polling instead of sleeping: see progress_loop).
  class WaitScope {
   public:
    explicit WaitScope(UcxTransport& t);
    ~WaitScope();
    WaitScope(const WaitScope&) = delete;
    WaitScope& operator=(const WaitScope&) = delete;

   private:
    UcxTransport& t_;
  };

  // CPU seconds the progress thread has used so far.
  double progress_cpu_seconds() const;

  // The ODC protocol's transport (odc_transport.h; ucx_odc.cpp): the operations above per unit
  // buffer, the receiver calling the handlers, adds on the host.
  std::string_view name() const override { return "ucx"; }
  void set_handlers(Handlers handlers) override;
  void detach() override;
  AccumulatorMemory& accumulator_memory() override { return host_accumulator_memory(); }
  void start_gather(int buffer, std::span<const ShardPiece> pieces, float* full, std::int64_t padded) override;
  bool gather_done(int buffer) override;
  void wait_gather(int buffer, const std::string& what) override;
  void start_push(int buffer, int unit, std::int32_t sequence, std::span<const ShardPiece> pieces, const float* full,
                  std::vector<std::int64_t>& chunks) override;
  bool push_done(int buffer) override;
  void wait_push(int buffer, const std::string& what) override;
  void compute_waits(bool waiting) override;
  double timeout_s() const override { return options_.timeout_s; }
  TransportResources resources() const override;
  PlannedMemory allocated() const override;

  // Resources held for the lifetime of the transport (the long-run benchmark checks they stay
  // flat): bytes of memory mapped and registered with UCX, and endpoints created.
  std::int64_t registered_bytes() const { return registered_bytes_; }
  int endpoints_created() const { return endpoints_created_; }

 private:
  struct Op;
  struct RecvOp;
  friend struct UcxCallbacks;
  void progress_loop();
  void issue(Op& op);
  void issue_gather_message(Op& op);  // a request or response (ucx_request_gather.cpp)
  void finish(Op* op, int status);
  void serve_request(int client, std::uint64_t id, std::int64_t offset, std::int64_t count);
  void start_flush();
  bool drained() const;
  std::vector<float> take_buffer(std::int64_t floats);
  void wake();
  void deliver(const PushHeader& header, const void* data);
  // A slot protocol message (a slot's notification to its owner, or the owner's ack) issued from the
  // progress thread; a failure is the transport's fatal error (nobody waits for it).
  void send_control(int peer, unsigned am_id, const PushHeader& header);
  float* slot_at(float* region_base, int client, int slot) const;
  // Floats per get/request/push message to `peer`: comm.chunk_bytes where its region is mapped
  // here (shared memory), comm.network_chunk_bytes otherwise.
  std::int64_t chunk_floats(int peer) const;
  void record_fatal(const std::string& message);

  HostGroup& group_;
  int rank_ = 0;
  int world_size_ = 1;
  TransportOptions options_;
  std::int64_t exposed_floats_ = 0;
  float* exposed_ = nullptr;
  std::int64_t registered_bytes_ = 0;
  int endpoints_created_ = 0;
  Completion control_completion_;  // tracks slot notifications and acks we send (nobody waits on it)

  void* context_ = nullptr;  // ucp_context_h
  void* worker_ = nullptr;   // ucp_worker_h
  void* memh_ = nullptr;     // ucp_mem_h
  std::vector<void*> endpoints_;  // ucp_ep_h per peer (self included)
  std::vector<void*> rkeys_;      // ucp_rkey_h per peer
  std::vector<std::uint64_t> remote_bases_;
  std::vector<const float*> direct_;  // peer regions mapped into our address space, or nullptr
  std::vector<bool> mappable_;        // ucp_rkey_ptr maps the peer's region here (self: always)
  std::vector<GatherProtocol> gather_protocols_;  // per peer, auto resolved
  int busy_poll_us_ = 0;  // keep progressing this long after the last event (network peers only; else 0)
  // Slot protocol (slot_protocol.h), where slots are configured. slot_busy_[owner * slots + s]:
  // our slot s at `owner` holds data not yet acked; slot_posted_[client]: its notifications
  // received, in order (progress thread). The copies and adds run on the host, at once.
  struct Slots;
  std::unique_ptr<std::atomic<bool>[]> slot_busy_;
  std::vector<std::deque<PushHeader>> slot_posted_;
  std::unique_ptr<PeerMemory> host_lanes_;
  std::unique_ptr<Slots> slots_;
  std::unique_ptr<SlotPusher> pusher_;
  std::unique_ptr<SlotServer> server_;
  std::mutex handlers_mutex_;    // guards handlers_ (set, detached; the slot server's serve)
  Handlers handlers_;
  bool slot_failed_ = false;     // progress thread: the slot protocol threw (the error is fatal_)
  std::vector<ShardPiece> slot_pieces_;  // compute thread
  bool slot_protocol(int peer) const { return pusher_ != nullptr && direct_[static_cast<std::size_t>(peer)] != nullptr; }
  bool progress_slots();  // progress thread: the slot protocol's work; whether it did any
  int worker_fd_ = -1;
  int wake_fd_ = -1;

  Receiver receiver_;
  // The ODC protocol's operations per unit buffer (compute thread; grown on first use).
  std::vector<std::unique_ptr<Completion>> gathers_, pushes_;
  Completion& completion(std::vector<std::unique_ptr<Completion>>& of, int buffer);

  // Compute threads blocked in wait() or a WaitScope: over the network the progress thread does
  // not sleep while they wait (their core is idle; a sleep and wake-up per message would cost more).
  std::atomic<int> waiters_{0};
  std::mutex mutex_;  // guards queue_, stop_, Completion::error_
  std::condition_variable done_cv_;
  std::deque<std::unique_ptr<Op>> queue_;   // queued by the compute thread
  bool stop_ = false;
  bool abandon_ = false;  // stop without draining (the destructor runs while an error unwinds)
  // Progress-thread state.
  std::deque<std::unique_ptr<Op>> waiting_;  // taken from queue_, not yet issued
  std::unordered_map<Op*, std::unique_ptr<Op>> inflight_ops_;       // owned while UCX holds them
  std::unordered_map<RecvOp*, std::unique_ptr<RecvOp>> rndv_receives_;
  std::vector<float> unaligned_;  // staging for pushes whose payload is not float-aligned
  std::vector<std::vector<float>> spare_buffers_;  // rendezvous push buffers, reused
  std::int64_t inflight_ = 0;
  // Request gathers. Client: requests sent and not yet answered, by id. Owner: responses to send
  // (queued by the request callback, issued after progress returns) and in flight.
  std::unordered_map<std::uint64_t, Op*> requests_;
  std::uint64_t next_request_id_ = 1;
  std::deque<std::unique_ptr<Op>> responses_;
  std::int64_t serving_ = 0;
  Completion serve_completion_;  // tracks responses we send (nobody waits on it)
  // Shutdown: the progress thread flushes the worker once drained, then runs until exit_.
  bool flush_started_ = false;
  bool flushed_ = false;  // guarded by mutex_
  bool exit_ = false;     // guarded by mutex_
  std::string fatal_;  // a transport-level failure (guarded by mutex_)
  std::thread progress_;
};

}  // namespace odc::distributed
