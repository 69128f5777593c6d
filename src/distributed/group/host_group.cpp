#include "odc/distributed/group/host_group.h"

#include <cstdint>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "exchange_parts.h"
#include "odc/core/error.h"

namespace odc::distributed {

namespace detail {

void sum_in_rank_order(const std::vector<std::string>& parts, std::span<double> values) {
  for (std::size_t i = 0; i < values.size(); ++i) {
    double sum = 0.0;
    for (const auto& part : parts) {
      double v = 0.0;
      std::memcpy(&v, part.data() + i * sizeof(double), sizeof(double));
      sum += v;
    }
    values[i] = sum;
  }
}

void place_gathered(const std::vector<std::string>& parts, std::size_t each, std::span<std::byte> all,
                    std::string_view what) {
  if (all.size() != each * parts.size()) {
    fail("{}: the root gathers {} bytes from each of {} ranks into {} bytes", what, each, parts.size(), all.size());
  }
  for (std::size_t r = 0; r < parts.size(); ++r) std::memcpy(all.data() + r * each, parts[r].data(), each);
}

void check_root(int root, int size, std::string_view what) {
  if (root < 0 || root >= size) fail("{}: gather to rank {}, but the group has ranks 0..{}", what, root, size - 1);
}

}  // namespace detail

std::unique_ptr<HostGroup> HostGroup::split(int color, std::string_view what) {
  (void)color;
  fail("{}: this group of {} ranks runs without MPI and cannot be split into sub-groups (launch with mpirun or "
       "odc-run)", what, size());
}

std::vector<std::string> HostGroup::all_gather_text(std::string_view mine, std::string_view what) {
  const std::vector<std::string> gathered = gather_text(mine, what);
  // Each part after its length: any bytes travel (binary records too), none is re-encoded.
  std::string all;
  for (const auto& part : gathered) {
    const auto bytes = static_cast<std::uint64_t>(part.size());
    all.append(reinterpret_cast<const char*>(&bytes), sizeof(bytes));
    all += part;
  }
  broadcast(all, what);
  std::vector<std::string> out;
  std::string_view in(all);
  for (int r = 0; r < size(); ++r) {
    std::uint64_t bytes = 0;
    ODC_CHECK(in.size() >= sizeof(bytes), "{}: the gathered parts end before rank {}'s", what, r);
    std::memcpy(&bytes, in.data(), sizeof(bytes));
    in.remove_prefix(sizeof(bytes));
    ODC_CHECK(in.size() >= bytes, "{}: rank {}'s part ends short", what, r);
    out.emplace_back(in.substr(0, bytes));
    in.remove_prefix(bytes);
  }
  return out;
}

void check_identical_across_ranks(HostGroup& group, const std::vector<std::pair<std::string, std::uint64_t>>& items) {
  const std::size_t n = items.size();
  const auto world = static_cast<std::size_t>(group.size());
  std::vector<std::uint64_t> mine;
  for (const auto& item : items) mine.push_back(item.second);
  std::vector<std::uint64_t> all(group.is_root() ? n * world : 0);
  group.gather_values<std::uint64_t>(mine, all, "the start-up check that every rank loaded the same inputs");
  // Rank 0 compares and tells everyone, so that every rank fails with the same message.
  std::string verdict;
  if (group.is_root()) {
    std::vector<std::string> problems;
    for (std::size_t i = 0; i < n; ++i) {
      std::vector<std::size_t> differing;
      for (std::size_t r = 1; r < world; ++r) {
        if (all[r * n + i] != all[i]) differing.push_back(r);
      }
      if (!differing.empty()) {
        problems.push_back(fmt::format("{} differs between rank 0 and rank(s) {}", items[i].first,
                                       fmt::join(differing, ", ")));
      }
    }
    verdict = fmt::format("{}", fmt::join(problems, "; "));
  }
  group.broadcast(verdict, "the start-up check's verdict");
  if (!verdict.empty()) {
    fail("ranks did not load the same inputs: {} (every rank must be started with the same config, "
         "--set overrides, environment and data files)", verdict);
  }
}

int HostGroup::ranks_on_host() const {
  try {
    return placement().ranks_per_host;
  } catch (const Error&) {
    return size();
  }
}

Placement block_placement(int rank, int world, int ranks_per_host, std::string_view source) {
  if (ranks_per_host <= 0 || world % ranks_per_host != 0) {
    fail("{} = {} does not divide the {} ranks of the job into hosts of equal size", source, ranks_per_host, world);
  }
  Placement p;
  p.ranks_per_host = ranks_per_host;
  p.hosts = world / ranks_per_host;
  p.host = rank / ranks_per_host;
  p.local_rank = rank % ranks_per_host;
  return p;
}

}  // namespace odc::distributed
