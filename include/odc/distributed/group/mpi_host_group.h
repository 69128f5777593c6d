#pragma once
// MpiHostGroup: the HostGroup of a job's processes, over an MPI communicator, with the watchdog
// that turns a wait on a dead or frozen peer into an error naming it (watchdog.h). Every
// exchange runs inside a watched wait labelled with its `what`.
//
// The comms of a multi-rank run (comm_factory.h) are built on the same communicator and watchdog.
#include <memory>
#include <string>

#include <mpi.h>

#include "odc/distributed/group/bootstrap.h"
#include "odc/distributed/group/host_group.h"
#include "odc/distributed/group/watchdog.h"

namespace odc::distributed {

class MpiHostGroup final : public HostGroup {
 public:
  // Collective over `comm`. timeout_s > 0 watches every wait of a multi-rank group (comm.timeout_s).
  // With `owned`, the group frees `comm` when it is destroyed (the sub-groups of split()).
  MpiHostGroup(MPI_Comm comm, double timeout_s, bool owned = false);
  ~MpiHostGroup() override;
  MpiHostGroup(const MpiHostGroup&) = delete;
  MpiHostGroup& operator=(const MpiHostGroup&) = delete;

  int rank() const override { return topology_.rank; }
  int size() const override { return topology_.world_size; }
  void barrier(std::string_view what) override;
  void all_reduce_sum(std::span<double> values, std::string_view what) override;
  void gather_to(int root, std::span<const std::byte> mine, std::span<std::byte> all, std::string_view what) override;
  std::vector<std::string> gather_text(std::string_view mine, std::string_view what) override;
  void broadcast(std::string& text, std::string_view what) override;
  void announce(std::string activity) override;
  // From the topology: hosts are MPI's shared-memory domains, numbered in the order of their
  // lowest rank. odc::Error (naming what differs) when the hosts run different numbers of ranks.
  Placement placement() const override;
  bool over_mpi() const override { return true; }
  std::unique_ptr<HostGroup> split(int color, std::string_view what) override;

  MPI_Comm comm() const { return comm_; }
  // Null for a single rank or without a timeout.
  Watchdog* watchdog() const { return watchdog_.get(); }
  // Where the ranks run (hosts, node-local ranks).
  const Topology& topology() const { return topology_; }

 private:
  MPI_Comm comm_;
  double timeout_s_;
  bool owned_;
  Topology topology_;
  std::unique_ptr<Watchdog> watchdog_;
};

// The group of every process of the job (MPI_COMM_WORLD); MPI must be initialized (MpiSession).
std::unique_ptr<MpiHostGroup> make_world_group(double timeout_s);

}  // namespace odc::distributed
