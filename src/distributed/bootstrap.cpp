#include "odc/distributed/bootstrap.h"

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
  MPI_Comm_free(&local);
  // One rank per host counts it: the node-local rank 0s.
  int leader = t.local_rank == 0 ? 1 : 0;
  MPI_Allreduce(&leader, &t.hosts, 1, MPI_INT, MPI_SUM, comm);
  std::array<char, 256> host{};
  gethostname(host.data(), host.size() - 1);
  t.hostname = host.data();
  return t;
}

}  // namespace odc::distributed
