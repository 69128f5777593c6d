// The reference implementation's two planners (reference_planners.h), DynamicSameMicro and
// DynamicDiffMicro, on its partitioning (reference_partition.cpp): the counts it tries and the
// split it keeps, as it tries and keeps them (tests/parity/test_planner_reference.py requires the
// plans to equal its re-derivation in Python, minibatch by minibatch).
#include "odc/data/reference_planners.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "odc/core/error.h"
#include "planner_parts.h"

namespace odc::data {

namespace {

using planner_detail::as_size;
using planner_detail::Index;
using planner_detail::Parts;
using planner_detail::set_cost;

struct Packer {
  const PlanInput& input;
  const std::vector<double>& costs;
  planner_detail::ReferencePartitioner partitioner{costs};

  std::int64_t tokens(const std::vector<Index>& items) const {
    std::int64_t total = 0;
    for (const Index i : items) total += input.lengths[as_size(i)];
    return total;
  }
  // min(sequences, ceil(tokens / cap)), at least 1: where the reference's count starts.
  std::size_t token_bound(const std::vector<Index>& items) const {
    const auto bound = static_cast<std::size_t>((tokens(items) + input.token_cap - 1) / input.token_cap);
    return std::max<std::size_t>(1, std::min(items.size(), bound));
  }
  bool fits(const Parts& microbatches) const {
    return std::all_of(microbatches.begin(), microbatches.end(),
                       [&](const std::vector<Index>& mb) { return tokens(mb) <= input.token_cap; });
  }
  // The rank's own smallest count whose partition fits (or one per sequence).
  Parts own_count(const std::vector<Index>& items) {
    if (items.empty()) return {};
    const std::vector<Index> by_cost = partitioner.by_cost(items);
    for (std::size_t m = token_bound(items);; ++m) {
      Parts mbs = partitioner.partition(by_cost, m, false);
      if (fits(mbs) || m >= items.size()) return mbs;
    }
  }
  Plan plan(const Parts& split, std::vector<Parts> microbatches) const {
    Plan out;
    out.per_microbatch = input.cost.per_microbatch;
    for (std::size_t r = 0; r < split.size(); ++r) {
      Parts kept;
      for (auto& mb : microbatches[r]) {
        if (!mb.empty()) kept.push_back(std::move(mb));
      }
      out.ranks.push_back(planner_detail::finish_rank(costs, split[r], std::move(kept)));
    }
    return out;
  }
  Plan diff_micro(const Parts& split) {
    std::vector<Parts> microbatches;
    for (const auto& items : split) microbatches.push_back(own_count(items));
    return plan(split, std::move(microbatches));
  }
  // The common count: raised while some rank's partition overfills (the rank that overfilled last
  // is tried first: the same count is refused, at the cost of one partition instead of all).
  Plan same_micro(const Parts& split) {
    std::size_t m = 1;
    std::size_t fewest = split.front().size();
    std::vector<std::vector<Index>> by_cost;
    for (const auto& items : split) {
      m = std::max(m, token_bound(items));
      fewest = std::min(fewest, items.size());
      by_cost.push_back(partitioner.by_cost(items));
    }
    std::size_t first = 0;
    for (;; ++m) {
      std::vector<Parts> microbatches(split.size());
      bool all_fit = true;
      for (std::size_t j = 0; j < split.size(); ++j) {
        const std::size_t r = (first + j) % split.size();
        microbatches[r] = partitioner.partition(by_cost[r], m, false);
        if (!fits(microbatches[r])) {
          all_fit = false;
          first = r;
          if (m < fewest) break;  // refused at this count whatever the other ranks give
        }
      }
      if (all_fit || m >= fewest) return plan(split, std::move(microbatches));
    }
  }
};

double spread(const std::vector<double>& costs, const Parts& split) {
  double high = 0.0;
  double low = 0.0;
  for (std::size_t r = 0; r < split.size(); ++r) {
    const double c = set_cost(costs, split[r]);
    high = r == 0 ? c : std::max(high, c);
    low = r == 0 ? c : std::min(low, c);
  }
  return high - low;
}

}  // namespace

Plan reference_plan(const PlanInput& input, const std::vector<double>& costs, ReferencePacking packing,
                    ReferenceSplit split) {
  for (std::size_t i = 0; i < costs.size(); ++i) {
    if (!(costs[i] > 0.0)) {
      fail("planner: the reference's packing needs positive costs; sequence {} (length {}) costs {} under cost model "
           "'{}'",
           i, input.lengths[i], costs[i], input.cost.kind);
    }
  }
  Packer packer{input, costs};
  const auto ranks = static_cast<std::size_t>(input.world_size);
  std::vector<Index> everything(costs.size());
  std::iota(everything.begin(), everything.end(), Index{0});
  const std::vector<Index> by_cost = packer.partitioner.by_cost(everything);
  if (packing == ReferencePacking::same_micro) return packer.same_micro(packer.partitioner.partition(by_cost, ranks, true));
  const Parts free = packer.partitioner.partition(by_cost, ranks, false);
  if (costs.size() % ranks != 0) return packer.diff_micro(free);
  const Parts equal = packer.partitioner.partition(by_cost, ranks, true);
  if (split == ReferenceSplit::spread) return packer.diff_micro(spread(costs, equal) < spread(costs, free) ? equal : free);
  Plan chosen = packer.diff_micro(free);
  Plan other = packer.diff_micro(equal);
  return other.makespan_odc() < chosen.makespan_odc() ? other : chosen;
}

}  // namespace odc::data
