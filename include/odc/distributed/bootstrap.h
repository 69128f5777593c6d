#pragma once
// Bootstrap over MPI: where this rank sits (world and node-local rank/size) and the start-up check
// that every rank loaded the same configuration, model and data.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace odc::distributed {

struct Topology {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;  // among the ranks of this host
  int local_size = 1;
  std::string hostname;
};

// Collective over MPI_COMM_WORLD (every rank must call it).
Topology discover_topology();

// Collective: every rank passes the same labels with its own fingerprint of each. If any
// fingerprint differs, every rank throws the same odc::Error naming the item and the ranks that
// disagree with rank 0, so the whole job stops instead of training on inconsistent inputs.
void check_identical_across_ranks(const std::vector<std::pair<std::string, std::uint64_t>>& items);

}  // namespace odc::distributed
