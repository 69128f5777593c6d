#pragma once
// The slot protocol of ODC's gradient pushes, written once for every transport whose clients write
// into their owners' memory: the IPC transport (peer memory on one host, host or GPU) and the UCX
// transport wherever an owner's region is mapped here (shared memory).
//
// Each client has `slots` data slots of `slot_floats` floats at each owner. A client uses its slots
// at an owner in ring order; the owner consumes each client's slots in the same order:
//
//   free    --(client: the chunk's copy into the slot completed; post the header)-->  posted
//   posted  --(owner: the receive handler's add from the slot completed; release)-->  free
//
// so a slot is rewritten only after its owner's ack, and each client's chunks reach the owner's
// handler in the order sent. The copies and adds run on lanes (peer_memory.h: at once on the host,
// CUDA streams on a GPU), the state changes travel through SlotSignals (a shared-memory mailbox,
// or active messages). SlotPusher is the client's half, SlotServer the owner's; both run on their
// transport's progress thread, which calls advance() and serve() until they report no work.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "odc/distributed/transport/ipc/peer_memory.h"
#include "odc/distributed/transport/odc_transport.h"

namespace odc::distributed {

// How a slot's state travels between a client and its owner.
class SlotSignals {
 public:
  virtual ~SlotSignals() = default;
  // Client side: whether our slot `slot` at `owner` may be written; the slot's data is complete.
  virtual bool slot_free(int owner, int slot) = 0;
  virtual void post(int owner, int slot, const PushHeader& header) = 0;
  // Owner side: `client`'s slot `slot` is posted (its header into `header`); its add completed.
  virtual bool posted(int client, int slot, PushHeader& header) = 0;
  virtual void release(int client, int slot) = 0;
  // Whether `rank` is known to be gone (its process exited), and how to name it in errors.
  virtual bool gone(int rank) const { (void)rank; return false; }
  virtual std::string describe(int rank) const;
};

struct SlotGeometry {
  int rank = 0;
  int world = 1;
  int slots = 1;                  // per (owner, client)
  std::int64_t slot_floats = 1;   // a chunk holds no more
  double timeout_s = 600.0;       // a slot not freed for this long is an error naming its owner
  // Client `client`'s slot `slot` at `owner`, in this process's address space (for every owner a
  // SlotPusher pushes to, and for owner == rank on the SlotServer).
  std::function<float*(int owner, int client, int slot)> address;
};

// The client's half. submit/done/wait on the compute thread; advance on the progress thread.
// Copies go where they cost least: on host lanes (they complete at once) submit copies every chunk
// that finds a free slot on the calling thread, and the progress thread posts them and copies the
// rest as slots free up; on a device's lanes the progress thread issues every copy.
class SlotPusher {
 public:
  SlotPusher(PeerMemory& lanes, SlotSignals& signals, SlotGeometry geometry, int buffers);

  // Pushes gradient buffer `buffer`'s pieces (owner, offset in its shard, at in `full`, count)
  // once the compute lane's work issued so far completed, in chunks of a slot; adds the chunks
  // each owner will count to `chunks[owner]`.
  void submit(int buffer, int unit, std::int32_t sequence, std::span<const ShardPiece> pieces, const float* full,
              std::vector<std::int64_t>& chunks);
  // Every chunk of the buffer is posted (the buffer may be rewritten). Rethrows a failure.
  bool done(int buffer);
  // Blocks until done; a backstop timeout (the progress thread names a stalled owner first).
  void wait(int buffer, const std::string& what);
  // No job is in flight (progress thread).
  bool idle() const;

  // Progress thread: posts the chunks whose copies completed, copies new ones into free slots
  // (signals' post runs here only).
  // Throws odc::Error naming the owner when a chunk found no free slot for timeout_s (or at once,
  // after a second, when the owner is gone). Returns whether it did anything.
  bool advance();
  // The progress thread failed: done() and wait() rethrow `error` from now on.
  void fail(std::exception_ptr error);

 private:
  struct Chunk {
    int owner;
    std::int64_t offset;  // into the owner's shard
    std::int64_t count;
    const float* source;
    bool issued = false;
  };
  struct Job {
    int unit = -1;
    std::int32_t sequence = 0;
    std::unique_ptr<LaneMark> ready;  // the gradient is complete on the compute lane
    std::vector<Chunk> chunks;
    bool started = false;
    std::size_t posted = 0;
    bool done = true;
    double stalled_since = -1.0;  // steady seconds since a chunk found no free slot; -1: not stalled
  };
  struct Pending {  // a chunk being copied into slot `slot` at its owner
    int slot;
    PushHeader header;
    int job;
  };

  // Copies chunks of the active jobs into free slots (mutex_ held); whether it copied any. Throws
  // when a chunk found no free slot for timeout_s.
  bool issue(double now);

  PeerMemory& lanes_;
  SlotSignals& signals_;
  SlotGeometry geometry_;
  bool eager_;  // host lanes: submit copies on the calling thread

  // All of it guarded by mutex_ (the lanes' push lane and the copies too: one thread at a time).
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Job> jobs_;      // per gradient buffer
  std::deque<int> job_order_;  // active jobs in submission order
  std::exception_ptr failure_;
  std::vector<std::vector<std::unique_ptr<LaneMark>>> copy_marks_;  // [owner][slot]
  std::vector<std::deque<Pending>> pending_;                        // per owner: copied, not yet posted
  std::vector<std::int64_t> next_slot_;                             // per owner: ring position
  std::vector<char> blocked_;                                       // per owner: scratch of issue()
};

// The owner's half, on the progress thread.
class SlotServer {
 public:
  SlotServer(PeerMemory& lanes, SlotSignals& signals, SlotGeometry geometry);
  // Hands each client's posted chunks to `handlers.receive` in ring order (its add issued on the
  // accumulate lane), releases the slots whose adds completed and reports them to
  // `handlers.applied`. Throws odc::Error for a malformed header. Returns whether it did anything.
  bool serve(const OdcTransport::Handlers& handlers);

 private:
  PeerMemory& lanes_;
  SlotSignals& signals_;
  SlotGeometry geometry_;
  std::vector<std::vector<std::unique_ptr<LaneMark>>> add_marks_;  // [client][slot]
  std::vector<std::int64_t> head_, next_;                          // per client: ring positions
};

}  // namespace odc::distributed
