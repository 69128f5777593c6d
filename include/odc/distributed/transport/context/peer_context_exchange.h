#pragma once
// PeerContextExchange: the context exchange between the ranks of one host over PeerMemory (host
// shared memory, or CUDA IPC regions for rows on a GPU; peer_memory.h).
//
// Set-up (collective over the HostGroup, once): every rank exports one region of
// max_exposed_bytes from its PeerMemory and one control block in host shared memory (the GPU path
// too: the host polls host memory, never the device); the handles are all-gathered, every rank
// maps every peer's region and block, and the names are unlinked.
//
// The control block of rank X holds two cache lines per peer P, written by X only:
//   ready[P] = {seq, tag, bytes}  X's region holds its `mine` of its seq-th exchange with P (of
//                                 that group tag, `bytes` long);
//   done[P]  = {seq, tag}         X has finished reading P's region for their seq-th exchange.
// seq counts the exchanges X and P took part in together (each side keeps its own count, the same
// on both: a pair's shared exchanges happen in the same order on both sides).
//
// One exchange on member X of a group (every member runs the same steps):
//   1. n[P] += 1 for every other member P;
//   2. the gather lane waits for the compute lane (the work that wrote `mine`, and the users of
//      `into` before it), copies `mine` into X's region, and the host waits for that copy;
//   3. publish: ready[P] = {n[P], tag, mine_bytes} for every other member P (release);
//   4. the pieces X receives from itself are copied from `mine` to `into`;
//   5. for every member P that X reads from, as soon as P's ready[X] shows seq n[P] (its tag must
//      be this group's): P's pieces for X are copied from P's region into `into` on the gather
//      lane; once they completed, done[P] = {n[P], tag};
//   6. X waits until every member that reads X's region shows done[X] = n: X's region may then be
//      overwritten by X's next exchange, and `mine` reused by the caller;
//   7. the compute lane waits for the gather lane: `into` is readable by work issued after.
// Why one region suffices: X rewrites its region only in its next exchange, after step 6, when
// every reader of this one is done. Why the counters are exact: while X waits for P's ready n (or
// done n), P cannot have moved past n, since P's own step 6 (or X's) waits for the other side of
// this very exchange. A seq beyond n, or a tag that differs at seq n, means the two ranks run
// their exchanges in different orders: an odc::Error naming both.
//
// Every wait is bounded by options.timeout_s; the error names `what`, the group's tag and the
// peer waited for, and whether its process has exited (pids in the control blocks; checked about
// every 100 ms, so a dead peer is named at once rather than after the timeout).
//
// Ranks that are threads of one process use each other's mappings (one memory, one address): a
// rank's exchange must outlive its peers' last looks at it (the tests end with a barrier).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "odc/distributed/group/host_group.h"
#include "odc/distributed/group/shared_segment.h"
#include "odc/distributed/transport/context/context_exchange.h"
#include "odc/distributed/transport/ipc/peer_memory.h"

namespace odc::distributed {

class PeerContextExchange final : public GroupContextExchange {
 public:
  // Collective over `group`; every rank on one host, every rank's `memory` of the same kind.
  PeerContextExchange(std::unique_ptr<PeerMemory> memory, HostGroup& group, const ContextExchangeOptions& options);
  ~PeerContextExchange() override;
  PeerContextExchange(const PeerContextExchange&) = delete;
  PeerContextExchange& operator=(const PeerContextExchange&) = delete;

  void exchange(const model::ContextSplit& split, std::span<const model::ExchangePiece> pieces, const void* mine,
                std::int64_t mine_bytes, void* into, std::int64_t into_bytes, std::string_view what) override;

  ContextExchangeKind kind() const override { return ContextExchangeKind::peer_memory; }
  int rank() const override { return rank_; }
  PlannedMemory allocated() const override;

  struct Line;  // one cache line of a control block (peer_context_exchange.cpp)

 private:
  Line* line(int owner, int peer, bool done) const;
  bool peer_gone(int peer) const;
  std::string describe_peer(int peer) const;

  std::unique_ptr<PeerMemory> memory_;
  ContextExchangeOptions options_;
  int rank_ = 0;
  int world_ = 1;
  std::vector<std::uint64_t> count_;       // per peer: exchanges taken part in together
  void* region_ = nullptr;                 // ours, exported
  std::vector<const char*> regions_;       // per rank: its region here
  std::vector<SharedSegment> blocks_;      // ours created, the other processes' opened
  std::vector<void*> block_views_;         // per rank: its control block here
  std::unique_ptr<LaneMark> compute_mark_;
  std::unique_ptr<LaneMark> gather_mark_;
};

}  // namespace odc::distributed
