#include "odc/distributed/group/bootstrap.h"

#include <unistd.h>

#include <array>

namespace odc::distributed {

Topology discover_topology(MPI_Comm comm) {
  Topology t;
  MPI_Comm_rank(comm, &t.rank);
  MPI_Comm_size(comm, &t.world_size);
  MPI_Comm local = MPI_COMM_NULL;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, t.rank, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &t.local_rank);
  MPI_Comm_size(local, &t.local_size);
  // One rank per host counts it: the node-local rank 0s (the host's lowest rank: the split is
  // keyed by rank). A host's number is the count of leaders before its own.
  int leader = t.local_rank == 0 ? 1 : 0;
  MPI_Allreduce(&leader, &t.hosts, 1, MPI_INT, MPI_SUM, comm);
  int before = 0;
  MPI_Exscan(&leader, &before, 1, MPI_INT, MPI_SUM, comm);
  if (t.rank == 0) before = 0;  // MPI_Exscan leaves rank 0's result undefined
  t.host = before;
  MPI_Bcast(&t.host, 1, MPI_INT, 0, local);
  MPI_Comm_free(&local);
  MPI_Allreduce(&t.local_size, &t.min_local_size, 1, MPI_INT, MPI_MIN, comm);
  MPI_Allreduce(&t.local_size, &t.max_local_size, 1, MPI_INT, MPI_MAX, comm);
  std::array<char, 256> host{};
  gethostname(host.data(), host.size() - 1);
  t.hostname = host.data();
  return t;
}

}  // namespace odc::distributed
