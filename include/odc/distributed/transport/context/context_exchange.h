#pragma once
// The distributed layer's side of context parallelism (model/context_split.h): the exchanges that
// move keys and values (and their gradients) between the members of one group of ranks, a group
// chosen per microbatch. Only the members take part; a rank outside the group never waits, and no
// collective over the world or communicator per group is made (ranks run free, as ODC's do).
//
// Two implementations, one choice (make_context_exchange):
//   PeerContextExchange  (peer_context_exchange.h) the ranks of one host, over PeerMemory: host
//                        shared memory, or CUDA IPC when the model runs on a CUDA device;
//   MpiContextExchange   (mpi_context_exchange.h)  ranks on several hosts, MPI point to point
//                        between the members (device data staged through host buffers).
// Both count the exchanges of every ordered pair of ranks: the pair's n-th exchange is the same
// one on both sides however the groups change, and carries the group's tag, so a member that
// arrives at another exchange than its peer is an error naming both tags, not a silent mix-up.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "odc/backend/backend.h"
#include "odc/core/planned_memory.h"
#include "odc/distributed/group/host_group.h"
#include "odc/model/context_split.h"

namespace odc::distributed {

struct ContextExchangeOptions {
  double timeout_s = 300.0;  // comm.timeout_s: a longer wait for a peer is an error naming it
  // The most bytes one member exposes in one exchange (its `mine`): the region each rank exports
  // (peer memory) or stages (MPI with device data). A larger exchange is an odc::Error.
  std::int64_t max_exposed_bytes = 0;
  // Test-only: MPI point to point even when every rank is on one host (over an MpiHostGroup).
  bool force_mpi = false;
  void validate() const;
};

enum class ContextExchangeKind { peer_memory, mpi };
std::string_view context_exchange_kind_name(ContextExchangeKind kind);  // "peer memory", "MPI"

// Which exchange a run gets: peer memory when its ranks share one host (and options.force_mpi is
// off), MPI across hosts (which needs the ranks to meet over MPI). odc::Error for a combination
// that cannot run (several hosts without MPI; force_mpi without MPI).
ContextExchangeKind choose_context_exchange(int hosts, bool over_mpi, const ContextExchangeOptions& options);

// What an exchange of `kind` allocates on a rank of `world` ranks (`device_state`: the model's
// rows live in a device's memory), from the options alone: the constructors size their memory
// with the same function and allocated() returns the same items (tests hold one to the other).
PlannedMemory planned_context_exchange(const ContextExchangeOptions& options, ContextExchangeKind kind, int world,
                                       bool device_state);

// The model's ContextExchange, with what the plan and the logs ask of it.
class GroupContextExchange : public model::ContextExchange {
 public:
  virtual ContextExchangeKind kind() const = 0;
  virtual int rank() const = 0;  // in the HostGroup it was built over (split.ranks are its ranks)
  virtual PlannedMemory allocated() const = 0;
  std::string_view name() const { return context_exchange_kind_name(kind()); }
};

// Collective over `group` (every rank builds one; none of its exchanges is). `device`: the model's
// backend when its rows live on a device (CUDA: peer memory over CUDA IPC on one host, staging
// through host buffers across hosts); null or a CPU backend: host memory. The device backend must
// outlive the exchange.
std::unique_ptr<GroupContextExchange> make_context_exchange(HostGroup& group, backend::Backend* device,
                                                            const ContextExchangeOptions& options);

namespace detail {
// The checks both implementations make before moving a byte: the split names this rank at its
// place, its ranks are distinct ranks of the world, every piece's member indices are in the group
// and the bytes it reads or writes on this rank lie inside `mine` / `into`, and `mine` fits the
// exposed size. odc::Error naming `what`, the group's tag and the sizes.
void check_exchange(const model::ContextSplit& split, std::span<const model::ExchangePiece> pieces, int rank,
                    int world, std::int64_t mine_bytes, std::int64_t into_bytes, std::int64_t max_exposed_bytes,
                    std::string_view what);
// "rank 3 (member 1 of [2, 3, 0])" etc. for errors.
std::string describe_group(const model::ContextSplit& split);
}  // namespace detail

}  // namespace odc::distributed
