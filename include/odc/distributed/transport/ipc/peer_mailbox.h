#pragma once
// PeerMailbox: the control blocks of the IPC transport's gradient pushes, in host shared memory
// (for GPU ranks too: the progress threads poll host memory, never the device).
//
// Every owner rank has one block with `slots` message slots per client. Slot k of client c at
// owner o pairs with a data slot in o's peer memory that only c writes. A slot's state moves
//
//   free --(client: copy of the chunk into the data slot has completed, then post)--> posted
//   posted --(owner: the chunk is added into its accumulator and that add has completed)--> free
//
// so a data slot is rewritten only after its owner acknowledged it. A client uses its slots at an
// owner in ring order, and the owner consumes them in the same order: each client's chunks are
// accumulated in the order it sent them.
//
// Construction is collective over the group: rank 0's `prefix` names every block, each rank
// creates its own, opens every peer's, and the names are removed once all have them mapped.
#include <cstdint>
#include <string>
#include <vector>

#include <sys/types.h>

#include "odc/distributed/group/host_group.h"
#include "odc/distributed/group/shared_segment.h"
#include "odc/distributed/transport/slot_protocol.h"

namespace odc::distributed {

// The slot protocol's signals on one host (slot_protocol.h): a header carries the unit (tag), the
// client's push sequence of it, the offset into the owner's shard and the fp32 count in the slot.
class PeerMailbox final : public SlotSignals {
 public:
  PeerMailbox(HostGroup& group, const std::string& prefix, int slots);
  PeerMailbox(const PeerMailbox&) = delete;
  PeerMailbox& operator=(const PeerMailbox&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_; }
  int slots() const { return slots_; }

  // ---- client side (this rank sends to `owner`) ----
  // The owner has consumed slot `slot` of this client (or it was never used).
  bool slot_free(int owner, int slot) override;
  // The data slot holds `header`'s chunk (its copy completed): hands it to the owner.
  void post(int owner, int slot, const PushHeader& header) override;

  // ---- owner side ----
  // Slot `slot` of `client` holds a posted chunk: `header` receives it.
  bool posted(int client, int slot, PushHeader& header) override;
  // The chunk in slot `slot` of `client` is applied: the client may reuse the slot.
  void release(int client, int slot) override;

  // Whether `rank`'s process still exists (ranks of one host: the pid each block records).
  bool alive(int rank) const;
  pid_t pid(int rank) const;
  bool gone(int rank) const override { return !alive(rank); }
  // "rank 2 (pid 123) exited" or "... is alive but not progressing".
  std::string describe(int rank) const override;

  struct Slot;  // one cache line of a block (peer_mailbox.cpp)

 private:
  Slot* slot_at(int owner, int client, int slot) const;

  int rank_;
  int world_;
  int slots_;
  std::vector<SharedSegment> blocks_;  // index = owner rank; ours is created, the others opened
  std::vector<void*> views_;           // each block's address here (a same-process peer's own mapping)
};

}  // namespace odc::distributed
