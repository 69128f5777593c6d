#pragma once
// Bootstrap over MPI: where this rank sits — world and node-local rank/size, host name.
#include <string>

#include <mpi.h>

namespace odc::distributed {

struct Topology {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;  // among the ranks of this host
  int local_size = 1;
  int hosts = 1;       // distinct hosts of the job
  int host = 0;        // this rank's host: hosts are numbered in the order of their lowest rank
  int min_local_size = 1;  // the fewest and the most ranks any host runs
  int max_local_size = 1;
  std::string hostname;
};

// Collective over `comm` (every rank must call it).
Topology discover_topology(MPI_Comm comm);

}  // namespace odc::distributed
