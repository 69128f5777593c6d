#pragma once
// ShmHostGroup: a HostGroup of the processes (or threads) of one host, without MPI — for a machine
// that has no MPI runtime (`odc-run --local N`, local_launch.h). The ranks meet in a POSIX
// shared-memory segment (/dev/shm/odc-host-group-JOB): rank 0 creates it, the others open it,
// and once every rank has joined its name is removed, so nothing is left behind even if the job
// later crashes.
//
// Every exchange is rounds of process-shared atomics: each rank writes its part of the payload
// into its chunk of a round buffer, marks its arrival and polls (yield, then sleeps backing off to
// 1 ms) until every rank arrived. Payloads larger than a chunk take several rounds, so any size
// works (memory handles, configs: a few MB).
//
// As strict as InProcessGroup: a call whose kind or `what` differs from rank 0's is an error on
// every rank naming both sides. Every wait is bounded: past the timeout it is an error naming
// `what`, the ranks that have not arrived and the activity each last announced; a peer process
// that exited is reported within ~0.1 s as "rank R (pid P) exited". After an error the group is
// broken: every later call on this rank throws, and the other ranks' waits end with it too.
//
// Ranks may be threads of one process (each constructs its member with the same job id): the
// unit tests run them that way.
#include <cstdint>
#include <memory>
#include <string>

#include "odc/distributed/group/host_group.h"

namespace odc::distributed {

namespace shm {
class Segment;
struct Deadline;
}  // namespace shm

class ShmHostGroup final : public HostGroup {
 public:
  // Joins local job `job` (letters, digits, '.', '_', '-') as `rank` of `size`. Blocks until every
  // rank has joined, at most timeout_s (> 0; also the bound of every later wait).
  ShmHostGroup(std::string job, int rank, int size, double timeout_s);
  ~ShmHostGroup() override;
  ShmHostGroup(const ShmHostGroup&) = delete;
  ShmHostGroup& operator=(const ShmHostGroup&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void barrier(std::string_view what) override;
  void all_reduce_sum(std::span<double> values, std::string_view what) override;
  void gather_to(int root, std::span<const std::byte> mine, std::span<std::byte> all, std::string_view what) override;
  std::vector<std::string> gather_text(std::string_view mine, std::string_view what) override;
  void broadcast(std::string& text, std::string_view what) override;
  void announce(std::string activity) override;

  const std::string& job() const { return job_; }
  // The payload bytes per rank and round (larger payloads take several rounds).
  std::uint64_t chunk_bytes() const;

 private:
  // Which ranks' contributions a rank copies out of an exchange (root_reads_all: rank `root`).
  enum class Readers { none, root_reads_all, all_read_all, all_read_root };
  // Meets every rank; returns the contributions this rank reads (the others empty), in rank order.
  std::vector<std::string> exchange(std::string_view kind, std::string_view what, std::string_view mine, Readers readers,
                                    int root = 0);
  // Waits until every rank arrived at `round_` (errors: see the class comment).
  void wait_for_every_rank(const std::string& label);
  // Records `message` as this group's error, tells the other ranks, and throws it.
  [[noreturn]] void give_up(const std::string& message);
  // Marks this rank joined and waits (until `deadline`) for the others; rank 0 then removes the name.
  void join(const shm::Deadline& deadline);
  // Why `rank` can no longer arrive: "rank R (pid P) exited" / "... left the group"; "" while it can.
  std::string departure(int rank) const;

  std::string job_;
  int rank_;
  int size_;
  double timeout_s_;
  std::unique_ptr<shm::Segment> segment_;
  std::uint64_t round_ = 0;
  std::string broken_;  // the error that broke the group ("" while it works)
};

// Whether odc-run --local started this process (ODC_LOCAL_JOB is set).
bool launched_locally();

// This process's member of the local job named by ODC_LOCAL_JOB, ODC_LOCAL_RANK and
// ODC_LOCAL_SIZE (set by odc-run --local); a missing or malformed variable is an error naming it
// and its value.
std::unique_ptr<ShmHostGroup> make_local_group_from_env(double timeout_s);

}  // namespace odc::distributed
