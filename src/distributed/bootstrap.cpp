#include "odc/distributed/bootstrap.h"

#include <unistd.h>

#include <array>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <mpi.h>

#include "odc/core/error.h"

namespace odc::distributed {

Topology discover_topology() {
  Topology t;
  MPI_Comm_rank(MPI_COMM_WORLD, &t.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &t.world_size);
  MPI_Comm local = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, t.rank, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &t.local_rank);
  MPI_Comm_size(local, &t.local_size);
  MPI_Comm_free(&local);
  std::array<char, 256> host{};
  gethostname(host.data(), host.size() - 1);
  t.hostname = host.data();
  return t;
}

void check_identical_across_ranks(const std::vector<std::pair<std::string, std::uint64_t>>& items) {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const auto n = items.size();
  std::vector<std::uint64_t> mine;
  for (const auto& item : items) mine.push_back(item.second);
  std::vector<std::uint64_t> all(n * static_cast<std::size_t>(world));
  MPI_Allgather(mine.data(), static_cast<int>(n), MPI_UINT64_T, all.data(), static_cast<int>(n), MPI_UINT64_T,
                MPI_COMM_WORLD);
  std::vector<std::string> problems;
  for (std::size_t i = 0; i < n; ++i) {
    std::vector<int> differing;
    for (int r = 1; r < world; ++r) {
      if (all[static_cast<std::size_t>(r) * n + i] != all[i]) differing.push_back(r);
    }
    if (!differing.empty()) {
      problems.push_back(fmt::format("{} differs between rank 0 and rank(s) {}", items[i].first,
                                     fmt::join(differing, ", ")));
    }
  }
  if (!problems.empty()) {
    fail("ranks did not load the same inputs: {} (every rank must be started with the same config, "
         "--set overrides, environment and data files)", fmt::join(problems, "; "));
  }
}

}  // namespace odc::distributed
