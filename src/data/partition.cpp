// Number partitioning for the planner: Karmarkar-Karp largest differencing, a swap/move
// refinement, a longest-first greedy, and the splits of a minibatch over the ranks built from them
// (LocalSort's round-robin, LB-Micro's equal counts, LB-Mini's free counts).
//
// Guarantees by construction (max_cost = the largest per-rank total cost, in set_cost sums):
//   max_cost(lb_micro) <= max_cost(local_sort): LB-Micro also evaluates the round-robin split
//     (which is exactly LocalSort's rank assignment and has equal counts) and keeps it when it is
//     better.
//   max_cost(lb_mini) <= max_cost(lb_micro) (when lb_micro is defined, n % D == 0): LB-Mini also
//     evaluates LB-Micro's split and keeps it when its max cost is lower.
//   max_cost(lb_mini_equal) == max_cost(lb_micro): lb_mini_equal takes LB-Micro's split as it is
//     (only the microbatch counts within the ranks differ), so lb_mini <= lb_mini_equal as well.
// The reference keeps the equal-count split when its max-min spread is smaller; comparing the max
// is what the minibatch barrier pays for, and it is what makes the chain above exact.
#include "odc/data/partition.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>
#include <utility>

#include "odc/core/error.h"
#include "kk_tuples.h"
#include "planner_parts.h"

namespace odc::data::planner_detail {

// ---- Karmarkar-Karp -----------------------------------------------------------------------------

namespace {

// A partial solution is a k-tuple of disjoint subsets. Start with one tuple per item (or, equal
// size, per group of k consecutive items in decreasing cost, one item per subset). Repeatedly take
// the two tuples with the largest spread (max - min subset cost) and merge them: sort both by
// decreasing cost and unite the i-th largest of one with the i-th smallest of the other, so the
// large differences cancel. Equal size: every tuple but (at most) the one built from the last,
// incomplete group has equal subset sizes, so uniting subsets pairwise keeps sizes within one.

}  // namespace

// Largest differencing over the initial tuples (ids in their order): the two of largest spread
// merged, again and again, until one is left; its subsets, sorted, their items linked by `next`.
std::vector<Subset> differencing(std::vector<Tuple> tuples, std::size_t k, std::vector<Index>& next) {
  TupleQueue queue;  // by spread, then creation order (the deterministic tie-break)
  for (std::size_t id = 0; id < tuples.size(); ++id) queue.add_initial(tuples[id].spread(k), id);
  tuples.reserve(2 * tuples.size());  // merged-away tuples are left empty; ids stay indices
  queue.start();
  while (queue.size() > 1) {
    Tuple a = std::move(tuples[queue.pop()]);
    Tuple b = std::move(tuples[queue.pop()]);
    // The pairing is symmetric, so the tuple with more subsets leads the united lists (its heads
    // order the result's ties).
    if (b.heap.size() > a.heap.size()) std::swap(a, b);
    merge_tuples(a, b, k, next);
    queue.push(a.spread(k), tuples.size());
    tuples.push_back(std::move(a));
  }
  return tuples[queue.pop()].take_sorted();
}

Parts karmarkar_karp_impl(const std::vector<double>& costs, std::size_t k, bool equal_size) {
  const std::size_t n = costs.size();
  Parts parts(k);
  if (n == 0) return parts;
  std::vector<Index> next(n, -1);
  std::vector<Tuple> tuples;
  auto add = [&](Tuple tuple) { tuples.push_back(std::move(tuple)); };

  if (equal_size) {
    std::vector<Index> order(n);
    std::iota(order.begin(), order.end(), Index{0});
    std::sort(order.begin(), order.end(), [&](Index x, Index y) {
      if (costs[as_size(x)] != costs[as_size(y)]) return costs[as_size(x)] > costs[as_size(y)];
      return x < y;
    });
    for (std::size_t start = 0; start < n; start += k) {
      Tuple tuple;
      for (std::size_t j = start; j < std::min(n, start + k); ++j) {
        tuple.push({costs[as_size(order[j])], order[j], order[j]});
      }
      add(std::move(tuple));
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      const auto item = static_cast<Index>(i);
      Tuple tuple;
      tuple.push({costs[i], item, item});
      add(std::move(tuple));
    }
  }
  const std::vector<Subset> last = differencing(std::move(tuples), k, next);
  for (std::size_t p = 0; p < last.size(); ++p) {
    for (Index item = last[p].head; item >= 0; item = next[as_size(item)]) {
      parts[p].push_back(item);
      if (item == last[p].tail) break;
    }
    std::sort(parts[p].begin(), parts[p].end());
  }
  return parts;
}

// ---- refinement ---------------------------------------------------------------------------------

namespace {

struct Entry {
  double cost;
  Index item;
  bool operator<(const Entry& other) const {
    if (cost != other.cost) return cost < other.cost;
    return item < other.item;
  }
};

// A change between a heavier part `hi` and a lighter part `lo` (gap = cost(hi) - cost(lo) > 0)
// that moves `delta` of cost from hi to lo, with 0 < delta < gap. Any such change strictly lowers
// the sum of squared part costs, by 2*delta*(gap - delta) > 0, so the search cannot cycle (a
// transfer past half the gap inverts the pair, and still lowers it); and neither the maximum part
// cost can grow (both new costs lie strictly between the old two) nor the minimum shrink. Of the
// admissible changes of a pair the one that lowers the sum the most is taken: delta nearest gap/2.
struct Change {
  double delta = 0.0;
  double gain = 0.0;  // delta * (gap - delta), half the drop of the sum of squares
  std::size_t hi_pos = 0;  // position in hi's sorted entries
  std::size_t lo_pos = 0;  // position in lo's sorted entries (swaps only)
  bool is_move = false;
};

class Refiner {
 public:
  Refiner(const std::vector<double>& costs, Parts& parts, bool equal_size,
          Index movable_below = std::numeric_limits<Index>::max())
      : parts_(parts),
        equal_size_(equal_size),
        movable_below_(movable_below),
        entries_(parts.size()),
        sums_(parts.size()),
        version_(parts.size(), 0),
        seen_(parts.size(), 0) {
    for (std::size_t p = 0; p < parts.size(); ++p) {
      for (Index item : parts[p]) entries_[p].push_back({costs[as_size(item)], item});
      std::sort(entries_[p].begin(), entries_[p].end());
      sums_[p] = sum_of(p);
      order_.insert({sums_[p], p});
    }
  }

  // Applies changes until none applies or a bound is reached, then writes the parts back.
  void run(std::size_t max_changes, std::size_t max_pair_checks) {
    for (std::size_t change = 0; change < max_changes && pair_checks_ < max_pair_checks; ++change) {
      if (!step()) break;
    }
    for (std::size_t p = 0; p < parts_.size(); ++p) {
      parts_[p].clear();
      for (const Entry& e : entries_[p]) parts_[p].push_back(e.item);
      std::sort(parts_[p].begin(), parts_[p].end());
    }
  }

 private:
  // The entries are sorted by (cost, item), a canonical order of the set, so summing them in it
  // makes the part's cost a function of its content only.
  double sum_of(std::size_t p) const {
    double sum = 0.0;
    for (const Entry& e : entries_[p]) sum += e.cost;
    return sum;
  }

  // One accepted change, or false when none applies. The most loaded part is paired with the
  // others, lightest first (largest gap, most room); failing that the least loaded with the
  // others, heaviest first. The first pair that admits an improving change takes its best one.
  bool step() {
    if (order_.size() < 2) return false;
    return scan(order_.rbegin()->second, true, top_cache_) ||
           scan(order_.begin()->second, false, bottom_cache_);
  }

  // Whether a pair admits a change depends only on the two parts' contents. So once the anchor
  // (the top or bottom part) has been scanned in vain, the next scan of the same, unmodified anchor
  // only needs the parts modified since: the result is what a full scan would give, but a part
  // stuck at the top no longer costs O(k) pairs per step.
  struct ScanCache {
    std::size_t part = std::numeric_limits<std::size_t>::max();
    std::uint64_t version = 0;
    std::size_t log_position = 0;  // modifications before this one were checked against the anchor
  };

  bool scan(std::size_t anchor, bool anchor_is_top, ScanCache& cache) {
    const std::size_t log_at_start = log_.size();
    auto attempt = [&](std::size_t other) {
      return anchor_is_top ? try_pair(anchor, other) : try_pair(other, anchor);
    };
    // Candidates come lightest first for the top anchor and heaviest first for the bottom one,
    // so the gap to the anchor shrinks along the scan and the first empty gap ends it.
    auto has_gap = [&](std::size_t other) {
      return anchor_is_top ? sums_[anchor] > sums_[other] : sums_[other] > sums_[anchor];
    };
    if (cache.part == anchor && cache.version == version_[anchor]) {
      std::vector<std::size_t> changed;
      ++stamp_;
      for (std::size_t pos = cache.log_position; pos < log_.size(); ++pos) {
        const std::size_t p = log_[pos];
        if (p == anchor || seen_[p] == stamp_) continue;
        seen_[p] = stamp_;
        changed.push_back(p);
      }
      std::sort(changed.begin(), changed.end(), [&](std::size_t x, std::size_t y) {
        const std::pair<double, std::size_t> kx{sums_[x], x}, ky{sums_[y], y};
        return anchor_is_top ? kx < ky : ky < kx;
      });
      for (std::size_t other : changed) {
        if (!has_gap(other)) break;
        if (attempt(other)) return true;
      }
    } else if (anchor_is_top) {
      for (auto it = order_.begin(); it != order_.end() && has_gap(it->second); ++it) {
        if (attempt(it->second)) return true;
      }
    } else {
      for (auto it = order_.rbegin(); it != order_.rend() && has_gap(it->second); ++it) {
        if (attempt(it->second)) return true;
      }
    }
    cache = {anchor, version_[anchor], log_at_start};
    return false;
  }

  bool try_pair(std::size_t hi, std::size_t lo) {
    ++pair_checks_;
    const double gap = sums_[hi] - sums_[lo];
    const double half = gap / 2.0;
    Change best;
    const auto& h = entries_[hi];
    const auto& l = entries_[lo];
    const auto consider = [&](double delta, std::size_t hi_pos, std::size_t lo_pos, bool is_move) {
      if (!(delta > 0.0 && delta < gap)) return;
      if (h[hi_pos].item >= movable_below_ || (!is_move && l[lo_pos].item >= movable_below_)) return;
      const double gain = delta * (gap - delta);
      if (gain > best.gain) best = {delta, gain, hi_pos, lo_pos, is_move};
    };
    // Swap: for each x in hi (ascending), the y in lo nearest cost(x) - gap/2 from either side:
    // j is the first y with cost(x) - cost(y) <= gap/2 (delta at most half the gap), j - 1 the
    // last one above it; the threshold rises with x, so one forward pointer does.
    std::size_t j = 0;
    for (std::size_t i = 0; i < h.size(); ++i) {
      const double threshold = h[i].cost - half;
      while (j < l.size() && l[j].cost < threshold) ++j;
      if (j > 0) consider(h[i].cost - l[j - 1].cost, i, j - 1, false);
      for (std::size_t jj = j; jj < l.size() && jj <= j + 1; ++jj) {  // +1: rounding at threshold
        consider(h[i].cost - l[jj].cost, i, jj, false);
      }
    }
    if (!equal_size_) {
      // Move: the items of hi nearest half the gap, from below and from above.
      const auto it = std::upper_bound(h.begin(), h.end(), half,
                                       [](double value, const Entry& e) { return value < e.cost; });
      const auto at = static_cast<std::size_t>(it - h.begin());
      if (at > 0) consider(h[at - 1].cost, at - 1, 0, true);
      if (at < h.size()) consider(h[at].cost, at, 0, true);
    }
    if (!(best.gain > 0.0)) return false;
    apply(hi, lo, best);
    return true;
  }

  void apply(std::size_t hi, std::size_t lo, const Change& change) {
    auto& h = entries_[hi];
    auto& l = entries_[lo];
    const Entry from_hi = h[change.hi_pos];
    h.erase(h.begin() + static_cast<std::ptrdiff_t>(change.hi_pos));
    if (!change.is_move) {
      const Entry from_lo = l[change.lo_pos];
      l.erase(l.begin() + static_cast<std::ptrdiff_t>(change.lo_pos));
      h.insert(std::upper_bound(h.begin(), h.end(), from_lo), from_lo);
    }
    l.insert(std::upper_bound(l.begin(), l.end(), from_hi), from_hi);
    for (std::size_t p : {hi, lo}) {
      order_.erase({sums_[p], p});
      sums_[p] = sum_of(p);
      order_.insert({sums_[p], p});
      ++version_[p];
      log_.push_back(p);
    }
  }

  Parts& parts_;
  bool equal_size_;
  Index movable_below_;  // items from here on are fixed to their parts
  std::vector<std::vector<Entry>> entries_;  // per part, ascending (cost, item)
  std::vector<double> sums_;
  std::set<std::pair<double, std::size_t>> order_;  // (cost, part): lightest first
  std::vector<std::uint64_t> version_;              // per part, bumped on every modification
  std::vector<std::size_t> log_;                    // modified parts, in order
  std::vector<std::uint64_t> seen_;                 // dedup stamps for a cached scan
  std::uint64_t stamp_ = 0;
  ScanCache top_cache_;
  ScanCache bottom_cache_;
  std::size_t pair_checks_ = 0;  // work done, for the bound
};

// Refinement bounds. Every accepted change strictly lowers the sum of squared part costs, so the
// search ends on its own, but with many parts and few items per part it can creep along in tiny
// steps for a long time; the bounds keep planning time near-linear. Pair checks (each O(items of
// the two parts)) measure the work; 32 per item or part is where the gains had flattened out on
// long-tailed inputs (checked up to 16384 sequences x 1024 ranks).
std::size_t refine_iterations(std::size_t n, std::size_t k) { return 4 * (n + k) + 64; }
std::size_t refine_pair_checks(std::size_t n, std::size_t k) { return 32 * (n + k) + 1024; }

}  // namespace

void refine(const std::vector<double>& costs, Parts& parts, bool equal_size, Index movable_below) {
  Refiner(costs, parts, equal_size, movable_below)
      .run(refine_iterations(costs.size(), parts.size()),
           refine_pair_checks(costs.size(), parts.size()));
}

// ---- splits over the ranks ----------------------------------------------------------------------

Parts round_robin(std::size_t n, std::size_t ranks) {
  Parts parts(ranks);
  for (std::size_t i = 0; i < n; ++i) parts[i % ranks].push_back(static_cast<Index>(i));
  return parts;
}

namespace {

double max_set_cost(const std::vector<double>& costs, const Parts& parts) {
  double worst = 0.0;
  for (const auto& part : parts) worst = std::max(worst, set_cost(costs, part));
  return worst;
}

// Equal counts by greed: longest first, each into the lightest part that still has room (the first
// n % k parts hold one more). With few sequences per rank, verl-style equal-size KK forces one item
// of every size quantile into each part, so the part holding the longest sequence also receives
// mid-size ones; this greedy gives the longest sequences the shortest partners, which the
// refinement would otherwise reach only slowly.
Parts greedy_equal_count(const std::vector<double>& costs, std::size_t ranks) {
  const std::size_t n = costs.size();
  std::vector<Index> order(n);
  std::iota(order.begin(), order.end(), Index{0});
  std::sort(order.begin(), order.end(), [&](Index x, Index y) {
    if (costs[as_size(x)] != costs[as_size(y)]) return costs[as_size(x)] > costs[as_size(y)];
    return x < y;
  });
  Parts parts(ranks);
  std::set<std::pair<double, std::size_t>> open;  // (cost, part) of the parts with room
  for (std::size_t p = 0; p < ranks; ++p) open.insert({0.0, p});
  std::vector<double> sums(ranks, 0.0);
  for (Index item : order) {
    const std::size_t p = open.begin()->second;
    open.erase(open.begin());
    parts[p].push_back(item);
    sums[p] += costs[as_size(item)];
    const std::size_t room = n / ranks + (p < n % ranks ? 1 : 0);
    if (parts[p].size() < room) open.insert({sums[p], p});
  }
  for (auto& part : parts) std::sort(part.begin(), part.end());
  return parts;
}


}  // namespace

// LB-Micro's split: equal counts. The refined better start (equal-size KK or the greedy), or the
// round-robin split (LocalSort's) if that has the lower max cost.
Parts equal_count_split(const std::vector<double>& costs, std::size_t ranks) {
  Parts kk = karmarkar_karp_impl(costs, ranks, true);
  Parts greedy = greedy_equal_count(costs, ranks);
  Parts best =
      max_set_cost(costs, greedy) < max_set_cost(costs, kk) ? std::move(greedy) : std::move(kk);
  refine(costs, best, true);
  Parts rr = round_robin(costs.size(), ranks);
  if (max_set_cost(costs, rr) < max_set_cost(costs, best)) return rr;
  return best;
}

// LB-Mini's split candidates (planner_parts.h).
std::vector<Parts> free_count_candidates(const std::vector<double>& costs, std::size_t ranks) {
  std::vector<Parts> out(1, karmarkar_karp_impl(costs, ranks, false));
  refine(costs, out.front(), false);
  if (costs.size() % ranks == 0) out.push_back(equal_count_split(costs, ranks));
  return out;
}

std::size_t preferred_free_count(const std::vector<double>& costs, const std::vector<Parts>& candidates) {
  return candidates.size() > 1 && max_set_cost(costs, candidates[1]) < max_set_cost(costs, candidates[0]) ? 1 : 0;
}

Parts loaded_split(const std::vector<double>& costs, const std::vector<double>& loads) {
  const std::size_t n = costs.size();
  const std::size_t k = loads.size();
  // The loads are items n..n+k-1 of one extended cost vector, so that the tuples and the refinement
  // handle them like any item.
  std::vector<double> all = costs;
  all.insert(all.end(), loads.begin(), loads.end());
  std::vector<Index> next(n + k, -1);
  std::vector<Tuple> tuples;
  auto add = [&](Tuple tuple) { tuples.push_back(std::move(tuple)); };
  Tuple seeded;
  for (std::size_t r = 0; r < k; ++r) {
    const auto item = static_cast<Index>(n + r);
    seeded.push({loads[r], item, item});
  }
  add(std::move(seeded));
  for (std::size_t i = 0; i < n; ++i) {
    const auto item = static_cast<Index>(i);
    Tuple tuple;
    tuple.push({costs[i], item, item});
    add(std::move(tuple));
  }
  Parts parts(k);
  for (const Subset& subset : differencing(std::move(tuples), k, next)) {
    std::vector<Index> part;
    std::size_t rank = k;
    for (Index item = subset.head; item >= 0; item = next[as_size(item)]) {
      part.push_back(item);
      if (as_size(item) >= n) rank = as_size(item) - n;
      if (item == subset.tail) break;
    }
    ODC_CHECK(rank < k, "loaded_split: a part without its rank's load");
    std::sort(part.begin(), part.end());
    parts[rank] = std::move(part);
  }
  refine(all, parts, false, static_cast<Index>(n));
  for (auto& part : parts) {
    part.erase(std::remove_if(part.begin(), part.end(), [&](Index item) { return as_size(item) >= n; }), part.end());
  }
  return parts;
}

}  // namespace odc::data::planner_detail

namespace odc::data {

using planner_detail::as_size;
using planner_detail::Index;

namespace {

void check_costs(const std::vector<double>& costs) {
  for (std::size_t i = 0; i < costs.size(); ++i) {
    if (!std::isfinite(costs[i]) || costs[i] < 0.0) {
      fail("planner: item {} has cost {}; expected a finite cost >= 0", i, costs[i]);
    }
  }
}

}  // namespace

std::vector<std::vector<std::int64_t>> karmarkar_karp(const std::vector<double>& costs, int k,
                                                      bool equal_size) {
  if (k < 1) fail("karmarkar_karp: number of parts must be >= 1, got {}", k);
  check_costs(costs);
  return planner_detail::karmarkar_karp_impl(costs, static_cast<std::size_t>(k), equal_size);
}

void refine_partition(const std::vector<double>& costs,
                      std::vector<std::vector<std::int64_t>>& parts, bool equal_size) {
  check_costs(costs);
  std::vector<bool> seen(costs.size(), false);
  for (const auto& part : parts) {
    for (Index item : part) {
      if (item < 0 || as_size(item) >= costs.size() || seen[as_size(item)]) {
        fail("refine_partition: item {} is out of range [0, {}) or appears twice", item,
             costs.size());
      }
      seen[as_size(item)] = true;
    }
  }
  planner_detail::refine(costs, parts, equal_size);
}

}  // namespace odc::data
