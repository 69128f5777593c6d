#pragma once
// What the HostGroups that meet each rank's bytes as one string per rank (InProcessGroup,
// ShmHostGroup) do with the parts, in one place (private to src/distributed; host_group.cpp).
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace odc::distributed::detail {

// values[i] = the sum of every part's i-th double, added in rank order from 0.0: every rank that
// computes it from the same parts gets the same bits.
void sum_in_rank_order(const std::vector<std::string>& parts, std::span<double> values);

// The root's side of a fixed-size gather: part r (of `each` bytes) to bytes [r * each, (r + 1) * each)
// of `all`, which must hold every part (odc::Error naming `what` otherwise).
void place_gathered(const std::vector<std::string>& parts, std::size_t each, std::span<std::byte> all,
                    std::string_view what);

// odc::Error naming `what` unless 0 <= root < size.
void check_root(int root, int size, std::string_view what);

}  // namespace odc::distributed::detail
