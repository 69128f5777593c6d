#pragma once
// Number partitioning, the planner's building blocks (exposed for tests): split items with costs
// into k parts of near-equal total cost.
#include <cstdint>
#include <vector>

namespace odc::data {

// Karmarkar-Karp largest differencing into k parts; equal_size: part sizes differ by at most one
// (and are equal when k divides n). Returns k parts of item indices (each ascending), by
// decreasing cost; costs must be finite and >= 0.
std::vector<std::vector<std::int64_t>> karmarkar_karp(const std::vector<double>& costs, int k, bool equal_size);
// Swap refinement: repeatedly tries moving/swapping single items between the most (or least)
// loaded part and another part, accepting a change that moves less cost than the pair's gap (both
// new costs lie strictly between the old two: the largest part cost never rises, the smallest
// never falls, and the sum of squared part costs strictly falls, so it cannot cycle), the one
// nearest half the gap, until none applies or a work bound proportional to items + parts is
// reached; moves only when !equal_size, so part sizes are preserved when equal_size. Each part is
// returned ascending.
void refine_partition(const std::vector<double>& costs, std::vector<std::vector<std::int64_t>>& parts,
                      bool equal_size);

}  // namespace odc::data
