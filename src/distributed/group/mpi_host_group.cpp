#include "odc/distributed/group/mpi_host_group.h"

#include <cerrno>
#include <limits>

#include "odc/core/error.h"
#include "odc/distributed/group/startup_deadline.h"
#include "exchange_parts.h"

namespace odc::distributed {

namespace {
int count_of(std::size_t n, std::string_view what) {
  if (n > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
    fail("{}: {} bytes are more than one MPI message can carry", what, n);
  }
  return static_cast<int>(n);
}
}  // namespace

MpiHostGroup::MpiHostGroup(MPI_Comm comm, double timeout_s, bool owned)
    : comm_(comm), timeout_s_(timeout_s), owned_(owned), topology_(discover_topology(comm)) {
  if (topology_.world_size > 1 && timeout_s > 0) watchdog_ = std::make_unique<Watchdog>(comm_, timeout_s);
}

MpiHostGroup::~MpiHostGroup() {
  watchdog_.reset();  // its thread uses a duplicate of comm_
  if (owned_) MPI_Comm_free(&comm_);
}

Placement MpiHostGroup::placement() const {
  const Topology& t = topology_;
  if (t.min_local_size != t.local_size || t.max_local_size != t.local_size) {
    fail("the {} hosts of the job run different numbers of ranks (from {} to {}): place the same number on every "
         "host (mpirun --npernode N, or slots=N in the hostfile)", t.hosts, t.min_local_size, t.max_local_size);
  }
  return Placement{t.hosts, t.local_size, t.host, t.local_rank};
}

std::unique_ptr<HostGroup> MpiHostGroup::split(int color, std::string_view what) {
  MPI_Comm sub = MPI_COMM_NULL;
  {
    const Watchdog::Wait wait(watchdog_.get(), std::string(what));
    MPI_Comm_split(comm_, color, topology_.rank, &sub);
  }
  return std::make_unique<MpiHostGroup>(sub, timeout_s_, true);
}

void MpiHostGroup::barrier(std::string_view what) {
  const Watchdog::Wait wait(watchdog_.get(), std::string(what));
  MPI_Barrier(comm_);
}

void MpiHostGroup::all_reduce_sum(std::span<double> values, std::string_view what) {
  const Watchdog::Wait wait(watchdog_.get(), std::string(what));
  MPI_Allreduce(MPI_IN_PLACE, values.data(), count_of(values.size(), what), MPI_DOUBLE, MPI_SUM, comm_);
}

void MpiHostGroup::gather_to(int root, std::span<const std::byte> mine, std::span<std::byte> all,
                             std::string_view what) {
  detail::check_root(root, size(), what);
  const bool receives = rank() == root;
  if (receives && all.size() != mine.size() * static_cast<std::size_t>(size())) {
    fail("{}: rank {} gathers {} bytes from each of {} ranks into {} bytes", what, root, mine.size(), size(),
         all.size());
  }
  const int count = count_of(mine.size(), what);
  const Watchdog::Wait wait(watchdog_.get(), std::string(what));
  MPI_Gather(mine.data(), count, MPI_BYTE, receives ? all.data() : nullptr, count, MPI_BYTE, root, comm_);
}

std::vector<std::string> MpiHostGroup::gather_text(std::string_view mine, std::string_view what) {
  const int length = count_of(mine.size(), what);
  std::vector<int> lengths(is_root() ? static_cast<std::size_t>(size()) : 0, 0);
  const Watchdog::Wait wait(watchdog_.get(), std::string(what));
  MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, comm_);
  std::vector<int> displacements(lengths.size(), 0);
  std::size_t total = 0;
  for (std::size_t r = 0; r < lengths.size(); ++r) {
    displacements[r] = count_of(total, what);
    total += static_cast<std::size_t>(lengths[r]);
  }
  count_of(total, what);  // the displacements of MPI_Gatherv are ints
  std::string joined(total, '\0');
  MPI_Gatherv(mine.data(), length, MPI_CHAR, joined.data(), lengths.data(), displacements.data(), MPI_CHAR, 0, comm_);
  std::vector<std::string> out;
  for (std::size_t r = 0; r < lengths.size(); ++r) {
    out.push_back(joined.substr(static_cast<std::size_t>(displacements[r]), static_cast<std::size_t>(lengths[r])));
  }
  return out;
}

void MpiHostGroup::broadcast(std::string& text, std::string_view what) {
  int length = is_root() ? count_of(text.size(), what) : 0;
  const Watchdog::Wait wait(watchdog_.get(), std::string(what));
  MPI_Bcast(&length, 1, MPI_INT, 0, comm_);
  text.resize(static_cast<std::size_t>(length));
  MPI_Bcast(text.data(), length, MPI_CHAR, 0, comm_);
}

void MpiHostGroup::announce(std::string activity) {
  if (watchdog_) watchdog_->set_activity(std::move(activity));
}

std::unique_ptr<MpiHostGroup> make_world_group(double timeout_s) {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  // The bootstrap runs before this group's Watchdog exists: a peer frozen there is caught here.
  StartupDeadline deadline(size > 1 ? startup_timeout(timeout_s) : 0.0, program_invocation_short_name,
                           "the world group's bootstrap exchanges (topology: MPI_Comm_split_type, MPI_Allreduce; "
                           "the watchdog's MPI_Comm_dup)");
  return std::make_unique<MpiHostGroup>(MPI_COMM_WORLD, timeout_s);
}

}  // namespace odc::distributed
