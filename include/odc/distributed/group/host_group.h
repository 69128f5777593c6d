#pragma once
// HostGroup: the ranks of a job, for the small host-side exchanges around training — barriers,
// sums of statistics (loss, gradient norm, stop requests), gathering to one rank (checkpoint
// commits, the Hugging Face export's pieces to the rank writing their file, traces, the run
// summary) and broadcasting rank 0's decisions.
// Parameters and gradients never travel here: that is the Comm's job.
//
// Every call is collective: all ranks make the same calls in the same order. `what` names the
// exchange ("the checkpoint commit barrier") in a watchdog report or a mismatch error.
//
// Implementations: MpiHostGroup (mpi_host_group.h; the job's processes) and InProcessGroup
// (in_process_group.h; N ranks as threads of one process, for unit tests).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace odc::distributed {

// Where a rank sits: `host` of `hosts`, `local_rank` of `ranks_per_host` on it.
struct Placement {
  int hosts = 1;
  int ranks_per_host = 1;
  int host = 0;
  int local_rank = 0;
};

// The placement of `rank` of `world` when hosts are consecutive blocks of `ranks_per_host` ranks.
// odc::Error (naming `source`) when the blocks do not divide the world.
Placement block_placement(int rank, int world, int ranks_per_host, std::string_view source);

class HostGroup {
 public:
  virtual ~HostGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  virtual void barrier(std::string_view what) = 0;
  // Element-wise sum over ranks, in place (every rank passes the same number of values).
  virtual void all_reduce_sum(std::span<double> values, std::string_view what) = 0;
  // Fixed-size gather: rank r's `mine` lands at bytes [r * mine.size(), (r + 1) * mine.size()) of
  // `all` on rank `root` (which must hold size() * mine.size() bytes there); `all` is unused
  // elsewhere. Every rank names the same root.
  virtual void gather_to(int root, std::span<const std::byte> mine, std::span<std::byte> all, std::string_view what) = 0;
  // gather_to rank 0.
  void gather(std::span<const std::byte> mine, std::span<std::byte> all, std::string_view what) {
    gather_to(0, mine, all, what);
  }
  // Variable-size gather: rank 0 receives every rank's text, in rank order; other ranks an empty
  // vector.
  virtual std::vector<std::string> gather_text(std::string_view mine, std::string_view what) = 0;
  // Rank 0's `text` replaces every other rank's.
  virtual void broadcast(std::string& text, std::string_view what) = 0;
  // Every rank's text (any bytes), in rank order, on every rank (gather_text, then a broadcast).
  std::vector<std::string> all_gather_text(std::string_view mine, std::string_view what);

  // What this rank is doing now ("step 12: microbatch 3/7"): a peer stuck waiting for this rank
  // reports it (MpiHostGroup's watchdog). No effect where nothing watches.
  virtual void announce(std::string activity) { (void)activity; }

  bool is_root() const { return rank() == 0; }
  // Whether the ranks meet over MPI (then they may span hosts, and UCX and MPI collectives are
  // available to the comms); false for threads and one host's shared memory.
  virtual bool over_mpi() const { return false; }

  // Where the ranks run: hosts and this rank's place on its host. A group that knows nothing of
  // hosts (threads, one host's shared memory) is one host.
  virtual Placement placement() const { return Placement{1, size(), 0, rank()}; }
  // The ranks on this rank's host: placement()'s, or all of them where the hosts run different
  // numbers of ranks (placement() refuses those).
  int ranks_on_host() const;
  // Collective: the ranks passing the same `color` form a new group (ordered by rank), whose
  // exchanges never mix with this one's. Only groups over MPI can be split (odc::Error otherwise).
  virtual std::unique_ptr<HostGroup> split(int color, std::string_view what);

  // Typed fixed-size gather of trivially copyable values (`all` sized size() * mine.size() on `root`).
  template <typename T>
  void gather_values(std::span<const T> mine, std::span<T> all, std::string_view what, int root = 0) {
    gather_to(root, std::as_bytes(mine), std::as_writable_bytes(all), what);
  }
};

// Every rank passes the same labels with its own fingerprint of each. If any fingerprint differs,
// every rank throws the same odc::Error naming the items and the ranks that disagree with rank 0,
// so the whole job stops instead of training on inconsistent inputs (or hanging in a collective).
void check_identical_across_ranks(HostGroup& group, const std::vector<std::pair<std::string, std::uint64_t>>& items);

}  // namespace odc::distributed
