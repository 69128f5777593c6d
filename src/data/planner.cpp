// Load-balancing planners (LocalSort, LB-Micro, LB-Mini) and their building blocks: Karmarkar-Karp
// largest differencing, a swap/move refinement, and the cost models.
//
// Determinism: every rank runs this code on the same input and must get a bitwise identical plan.
// So every sort uses a total order (ties broken by item or part index), no container is iterated in
// an address-dependent order, and every set's cost is summed in one canonical order (ascending item
// index, set_cost) wherever costs are compared across candidate plans.
//
// Guarantees by construction (max_cost = the largest per-rank total cost, in set_cost sums):
//   max_cost(lb_micro) <= max_cost(local_sort): LB-Micro also evaluates the round-robin split
//   (which
//     is exactly LocalSort's rank assignment and has equal counts) and keeps it when it is better.
//   max_cost(lb_mini) <= max_cost(lb_micro) (when lb_micro is defined, n % D == 0): LB-Mini also
//     evaluates LB-Micro's split and keeps it when its max cost is lower.
// The reference keeps the equal-count split when its max-min spread is smaller; comparing the max
// is what the minibatch barrier pays for, and it is what makes the chain above exact.
#include "odc/data/planner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <queue>
#include <set>
#include <utility>

#include "odc/core/error.h"
#include "odc/core/hash.h"

namespace odc::data {

namespace {

using Index = std::int64_t;
using Parts = std::vector<std::vector<Index>>;

std::size_t as_size(Index i) { return static_cast<std::size_t>(i); }

// Cost of a set of items, summed in ascending index order so that the same set always gets the same
// double, whichever plan it appears in. `items` must be ascending.
double set_cost(const std::vector<double>& costs, const std::vector<Index>& items) {
  double sum = 0.0;
  for (Index i : items) sum += costs[as_size(i)];
  return sum;
}

double max_set_cost(const std::vector<double>& costs, const Parts& parts) {
  double worst = 0.0;
  for (const auto& part : parts) worst = std::max(worst, set_cost(costs, part));
  return worst;
}

// ---- Karmarkar-Karp -----------------------------------------------------------------------------
//
// A partial solution is a k-tuple of disjoint subsets. Start with one tuple per item (or, equal
// size, per group of k consecutive items in decreasing cost, one item per subset). Repeatedly take
// the two tuples with the largest spread (max - min subset cost) and merge them: sort both by
// decreasing cost and unite the i-th largest of one with the i-th smallest of the other, so the
// large differences cancel. Equal size: every tuple but (at most) the one built from the last,
// incomplete group has equal subset sizes, so uniting subsets pairwise keeps sizes within one.

// One subset: its cost, and its items as a singly linked list through a shared `next` array, so
// that uniting two subsets is O(1) instead of copying item lists on every merge.
struct Subset {
  double sum = 0.0;
  Index head = -1;
  Index tail = -1;
};

// A k-tuple stores only its non-empty subsets, by decreasing cost (ties: smaller head item first);
// the remaining k - size are empty with cost 0. A fresh singleton is then O(1) instead of O(k),
// which keeps n items over 1024 parts cheap.
struct Tuple {
  std::vector<Subset> subsets;
};

struct HeapEntry {
  double spread;
  Index id;  // creation order: the deterministic tie-break
};

struct HeapOrder {
  bool operator()(const HeapEntry& x, const HeapEntry& y) const {
    if (x.spread != y.spread) return x.spread < y.spread;  // largest spread on top
    return x.id > y.id;                                    // then the oldest tuple
  }
};

double spread_of(const Tuple& tuple, std::size_t k) {
  if (tuple.subsets.empty()) return 0.0;
  const double low = tuple.subsets.size() < k ? 0.0 : tuple.subsets.back().sum;
  return tuple.subsets.front().sum - low;
}

// Decreasing cost, ties by head item: a total order (heads are distinct), so sorting and merging
// sorted runs give the same unique sequence.
bool subset_before(const Subset& x, const Subset& y) {
  if (x.sum != y.sum) return x.sum > y.sum;
  return x.head < y.head;
}

void sort_subsets(std::vector<Subset>& subsets) {
  std::sort(subsets.begin(), subsets.end(), subset_before);
}

// v[0, mid) and v[mid, end) are sorted; make all of v sorted. A short tail is inserted element by
// element (binary search + rotate, no allocation): the common case of a singleton joining a tuple.
void merge_sorted_tail(std::vector<Subset>& v, std::size_t mid) {
  if (v.size() - mid <= 8) {
    for (std::size_t j = mid; j < v.size(); ++j) {
      const auto at = v.begin() + static_cast<std::ptrdiff_t>(j);
      std::rotate(std::upper_bound(v.begin(), at, *at, subset_before), at, at + 1);
    }
  } else {
    std::inplace_merge(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end(),
                       subset_before);
  }
}

// Merges b into a. Position i unites a's i-th largest subset with b's (k-1-i)-th largest (the
// pairing is symmetric, so a can be the larger tuple and be reused). Only positions in [k - nb, na)
// unite two non-empty subsets; elsewhere a subset passes unchanged, and those form two runs that
// are already sorted (a's first and b's first entries). So only the united ones need sorting and
// three sorted runs are merged: a full tuple meeting a singleton costs a binary search and a
// memmove instead of a sort of k entries.
template <typename Unite>
void merge_tuples(std::vector<Subset>& a, std::vector<Subset>& b, std::size_t k, Unite&& unite) {
  if (b.size() > a.size()) std::swap(a, b);
  const std::size_t na = a.size();
  const std::size_t nb = b.size();
  const std::size_t united_from = k - std::min(k, nb);
  const std::size_t kept_a = std::min(na, united_from);
  const std::size_t kept_b = k - std::max(na, united_from);
  for (std::size_t i = kept_a; i < na; ++i) a[i] = unite(a[i], b[k - 1 - i]);
  std::sort(a.begin() + static_cast<std::ptrdiff_t>(kept_a), a.end(), subset_before);
  merge_sorted_tail(a, kept_a);
  a.insert(a.end(), b.begin(), b.begin() + static_cast<std::ptrdiff_t>(kept_b));
  merge_sorted_tail(a, na);
}

Parts karmarkar_karp_impl(const std::vector<double>& costs, std::size_t k, bool equal_size) {
  const std::size_t n = costs.size();
  Parts parts(k);
  if (n == 0) return parts;
  std::vector<Index> next(n, -1);
  std::vector<Tuple> tuples;  // indexed by id; merged-away tuples are left empty
  tuples.reserve(2 * n);
  std::priority_queue<HeapEntry, std::vector<HeapEntry>, HeapOrder> heap;
  auto push = [&](Tuple tuple) {
    const auto id = static_cast<Index>(tuples.size());
    heap.push({spread_of(tuple, k), id});
    tuples.push_back(std::move(tuple));
  };

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
        tuple.subsets.push_back({costs[as_size(order[j])], order[j], order[j]});
      }
      sort_subsets(tuple.subsets);  // already decreasing; this only fixes equal-cost tie order
      push(std::move(tuple));
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      const auto item = static_cast<Index>(i);
      push(Tuple{{Subset{costs[i], item, item}}});
    }
  }

  auto unite = [&](const Subset& x, const Subset& y) {  // both non-empty
    next[as_size(x.tail)] = y.head;
    return Subset{x.sum + y.sum, x.head, y.tail};
  };

  while (heap.size() > 1) {
    const HeapEntry first = heap.top();
    heap.pop();
    const HeapEntry second = heap.top();
    heap.pop();
    Tuple a = std::move(tuples[as_size(first.id)]);
    Tuple b = std::move(tuples[as_size(second.id)]);
    merge_tuples(a.subsets, b.subsets, k, unite);
    push(std::move(a));
  }

  const Tuple& last = tuples[as_size(heap.top().id)];
  for (std::size_t p = 0; p < last.subsets.size(); ++p) {
    for (Index item = last.subsets[p].head; item >= 0; item = next[as_size(item)]) {
      parts[p].push_back(item);
      if (item == last.subsets[p].tail) break;
    }
    std::sort(parts[p].begin(), parts[p].end());
  }
  return parts;
}

void check_costs(const std::vector<double>& costs) {
  for (std::size_t i = 0; i < costs.size(); ++i) {
    if (!std::isfinite(costs[i]) || costs[i] < 0.0) {
      fail("planner: item {} has cost {}; expected a finite cost >= 0", i, costs[i]);
    }
  }
}

// ---- refinement ---------------------------------------------------------------------------------

struct Entry {
  double cost;
  Index item;
  bool operator<(const Entry& other) const {
    if (cost != other.cost) return cost < other.cost;
    return item < other.item;
  }
};

// A change between a heavier part `hi` and a lighter part `lo` that moves `delta` of cost from hi
// to lo, with 0 < delta <= gap/2: the pair's gap strictly shrinks and does not invert. Then the
// sum of squared part costs drops by 2*delta*(gap - delta) > 0, so the search cannot cycle; and
// neither the maximum part cost can grow (hi shrinks, lo grows to at most hi's new cost) nor the
// minimum shrink.
struct Change {
  double delta = 0.0;
  std::size_t hi_pos = 0;  // position in hi's sorted entries
  std::size_t lo_pos = 0;  // position in lo's sorted entries (swaps only)
  bool is_move = false;
};

class Refiner {
 public:
  Refiner(const std::vector<double>& costs, Parts& parts, bool equal_size)
      : parts_(parts),
        equal_size_(equal_size),
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
    const double half = (sums_[hi] - sums_[lo]) / 2.0;
    Change best;
    const auto& h = entries_[hi];
    const auto& l = entries_[lo];
    // Swap: for each x in hi (ascending), the cheapest y in lo with cost(x) - cost(y) <= half gives
    // that x's largest admissible delta; the threshold rises with x, so one forward pointer does.
    std::size_t j = 0;
    for (std::size_t i = 0; i < h.size(); ++i) {
      const double threshold = h[i].cost - half;
      while (j < l.size() && l[j].cost < threshold) ++j;
      for (std::size_t jj = j; jj < l.size() && jj <= j + 1; ++jj) {  // +1: rounding at threshold
        const double delta = h[i].cost - l[jj].cost;
        if (delta > 0.0 && delta <= half && delta > best.delta) best = {delta, i, jj, false};
        if (delta <= half) break;
      }
    }
    if (!equal_size_) {
      // Move: the costliest item of hi that is at most half the gap.
      auto it = std::upper_bound(h.begin(), h.end(), half,
                                 [](double value, const Entry& e) { return value < e.cost; });
      if (it != h.begin()) {
        --it;
        if (it->cost > best.delta) {
          best = {it->cost, static_cast<std::size_t>(it - h.begin()), 0, true};
        }
      }
    }
    if (!(best.delta > 0.0)) return false;
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

// ---- microbatches within one rank ---------------------------------------------------------------

// The sequences of one rank, as global indices (ascending), and what packing needs of them.
struct RankItems {
  const std::vector<Index>& items;
  const std::vector<std::int64_t>& lengths;
  const std::vector<double>& costs;
  std::int64_t cap;

  std::int64_t tokens(const std::vector<Index>& microbatch) const {
    std::int64_t total = 0;
    for (Index i : microbatch) total += lengths[as_size(i)];
    return total;
  }
  bool fits(const Parts& microbatches) const {
    return std::all_of(microbatches.begin(), microbatches.end(),
                       [&](const std::vector<Index>& mb) { return tokens(mb) <= cap; });
  }
  // KK by cost over the given global indices into m parts; empty parts dropped.
  Parts kk(const std::vector<Index>& subset, std::size_t m) const {
    std::vector<double> local(subset.size());
    for (std::size_t i = 0; i < subset.size(); ++i) local[i] = costs[as_size(subset[i])];
    Parts result;
    for (auto& part : karmarkar_karp_impl(local, m, false)) {
      if (part.empty()) continue;
      for (Index& i : part) i = subset[as_size(i)];  // ascending local -> ascending global
      result.push_back(std::move(part));
    }
    return result;
  }
};

// Counts tried with KK before first-fit decreasing takes over. A failure means the cost-balanced
// split overfilled some microbatch in tokens (cost grows faster than tokens, so the microbatches of
// short sequences carry the most tokens); on long-tailed data KK typically needs ~8% more
// microbatches than the token bound, so 16 covers ranks with up to ~200 microbatches, and beyond
// that the tries (a KK each) would cost more than they are worth.
constexpr int kMaxKkAttempts = 16;

// First-fit decreasing by tokens: always within the cap (each sequence fits alone), few bins.
Parts first_fit_decreasing(const RankItems& rank) {
  std::vector<Index> order = rank.items;
  std::sort(order.begin(), order.end(), [&](Index x, Index y) {
    const auto lx = rank.lengths[as_size(x)];
    const auto ly = rank.lengths[as_size(y)];
    return lx != ly ? lx > ly : x < y;
  });
  Parts bins;
  std::vector<std::int64_t> used;
  for (Index item : order) {
    const auto length = rank.lengths[as_size(item)];
    std::size_t b = 0;
    while (b < bins.size() && used[b] + length > rank.cap) ++b;
    if (b == bins.size()) {
      bins.emplace_back();
      used.push_back(0);
    }
    bins[b].push_back(item);
    used[b] += length;
  }
  for (auto& bin : bins) std::sort(bin.begin(), bin.end());
  return bins;
}

// The smallest count m >= ceil(tokens / cap) whose KK cost partition respects the cap, searched
// upward from that lower bound (m = number of sequences always fits: KK then keeps every item
// alone); after kMaxKkAttempts counts, first-fit decreasing by tokens.
Parts minimal_microbatches(const RankItems& rank) {
  if (rank.items.empty()) return {};
  const std::int64_t tokens = rank.tokens(rank.items);
  const auto count = rank.items.size();
  auto m = static_cast<std::size_t>(std::max<std::int64_t>((tokens + rank.cap - 1) / rank.cap, 1));
  for (int attempt = 0; attempt < kMaxKkAttempts && m <= count; ++attempt, ++m) {
    Parts candidate = rank.kk(rank.items, m);
    if (rank.fits(candidate)) return candidate;
  }
  return first_fit_decreasing(rank);
}

// Exactly m microbatches, given the rank's minimal packing (m between its size and the number of
// sequences): KK into m if that fits, else the minimal packing split up: the costliest microbatch
// holding two or more sequences is halved by a 2-way KK (a subset of a fitting microbatch fits)
// until there are m.
Parts exact_microbatches(const RankItems& rank, std::size_t m, Parts minimal) {
  Parts result = rank.kk(rank.items, m);
  if (result.size() == m && rank.fits(result)) return result;
  result = std::move(minimal);
  ODC_CHECK(result.size() <= m && m <= rank.items.size(),
            "{} microbatches for {} sequences, want {}", result.size(), rank.items.size(), m);
  while (result.size() < m) {
    std::size_t pick = result.size();
    double pick_cost = -1.0;
    for (std::size_t b = 0; b < result.size(); ++b) {
      const double c = set_cost(rank.costs, result[b]);
      if (result[b].size() >= 2 && c > pick_cost) {
        pick = b;
        pick_cost = c;
      }
    }
    ODC_CHECK(pick < result.size(), "no microbatch left to split");
    Parts halves = rank.kk(result[pick], 2);
    result[pick] = std::move(halves[0]);
    result.push_back(std::move(halves[1]));
  }
  return result;
}

// ---- splits over the ranks ----------------------------------------------------------------------

Parts round_robin(std::size_t n, std::size_t ranks) {
  Parts parts(ranks);
  for (std::size_t i = 0; i < n; ++i) parts[i % ranks].push_back(static_cast<Index>(i));
  return parts;
}

// Refinement bounds. Every accepted change strictly lowers the sum of squared part costs, so the
// search ends on its own, but with many parts and few items per part it can creep along in tiny
// steps for a long time; the bounds keep planning time near-linear. Pair checks (each O(items of
// the two parts)) measure the work; 32 per item or part is where the gains had flattened out on
// long-tailed inputs (checked up to 16384 sequences x 1024 ranks).
std::size_t refine_iterations(std::size_t n, std::size_t k) { return 4 * (n + k) + 64; }
std::size_t refine_pair_checks(std::size_t n, std::size_t k) { return 32 * (n + k) + 1024; }

void refine(const std::vector<double>& costs, Parts& parts, bool equal_size) {
  Refiner(costs, parts, equal_size)
      .run(refine_iterations(costs.size(), parts.size()),
           refine_pair_checks(costs.size(), parts.size()));
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

// LB-Mini's split: total cost balanced, counts free; LB-Micro's split kept when it is better.
Parts free_count_split(const std::vector<double>& costs, std::size_t ranks) {
  Parts kk = karmarkar_karp_impl(costs, ranks, false);
  refine(costs, kk, false);
  if (costs.size() % ranks == 0) {
    Parts equal = equal_count_split(costs, ranks);
    if (max_set_cost(costs, equal) < max_set_cost(costs, kk)) return equal;
  }
  return kk;
}

// Microbatches by decreasing cost (ties: smaller first index), costs filled in.
RankPlan finish_rank(const std::vector<double>& costs, const std::vector<Index>& items,
                     Parts microbatches) {
  std::vector<std::pair<double, std::vector<Index>>> keyed;
  keyed.reserve(microbatches.size());
  for (auto& mb : microbatches) {
    std::sort(mb.begin(), mb.end());
    const double c = set_cost(costs, mb);
    keyed.emplace_back(c, std::move(mb));
  }
  std::sort(keyed.begin(), keyed.end(), [](const auto& x, const auto& y) {
    if (x.first != y.first) return x.first > y.first;
    return x.second.front() < y.second.front();
  });
  RankPlan plan;
  plan.cost = set_cost(costs, items);
  for (auto& [c, mb] : keyed) {
    plan.microbatch_costs.push_back(c);
    plan.microbatches.push_back(std::move(mb));
  }
  return plan;
}

void validate(const PlanInput& input) {
  if (input.world_size < 1) fail("planner: world size must be >= 1, got {}", input.world_size);
  if (input.lengths.empty()) fail("planner: the global minibatch is empty; expected >= 1 sequence");
  if (input.token_cap <= 0) {
    fail("planner: data.max_tokens_per_microbatch must be > 0, got {}", input.token_cap);
  }
  const CostModel& c = input.cost;
  if (!std::isfinite(c.a) || !std::isfinite(c.b) || c.a < 0.0 || c.b < 0.0) {
    fail("planner: cost model '{}' has a = {}, b = {}; expected finite coefficients >= 0", c.kind,
         c.a, c.b);
  }
  for (std::size_t i = 0; i < input.lengths.size(); ++i) {
    const auto length = input.lengths[i];
    if (length < 1) {
      fail("planner: sequence {} of the minibatch has length {}; expected >= 1", i, length);
    }
    if (length > input.token_cap) {
      fail(
          "planner: sequence {} of the minibatch has length {}, longer than the token cap "
          "data.max_tokens_per_microbatch = {}; raise the cap or filter out longer sequences",
          i, length, input.token_cap);
    }
  }
  const auto n = input.lengths.size();
  const auto ranks = static_cast<std::size_t>(input.world_size);
  if (input.balance == Balance::lb_micro && n % ranks != 0) {
    fail(
        "planner: lb_micro needs the global minibatch ({} sequences) to divide evenly over {} "
        "ranks (equal sequence counts per rank)",
        n, ranks);
  }
}

}  // namespace

// ---- public API ---------------------------------------------------------------------------------

Balance parse_balance(const std::string& name) {
  if (name == "local_sort") return Balance::local_sort;
  if (name == "lb_micro") return Balance::lb_micro;
  if (name == "lb_mini") return Balance::lb_mini;
  fail("data.balance must be one of local_sort, lb_micro, lb_mini; got '{}'", name);
}

std::string balance_name(Balance balance) {
  switch (balance) {
    case Balance::local_sort: return "local_sort";
    case Balance::lb_micro: return "lb_micro";
    case Balance::lb_mini: return "lb_mini";
  }
  fail("unknown Balance value {}", static_cast<int>(balance));
}

CostModel CostModel::linear() { return CostModel{"linear", 0.0, 1.0}; }

CostModel CostModel::quadratic(double a, double b) {
  if (!std::isfinite(a) || !std::isfinite(b) || a < 0.0 || b < 0.0 || (a == 0.0 && b == 0.0)) {
    fail("quadratic cost model needs finite a, b >= 0, not both 0; got a = {}, b = {}", a, b);
  }
  return CostModel{"quadratic", a, b};
}

// Training FLOPs of one sequence of s tokens (model FLOPs, as in MFU; forward + backward):
//   Linear layers: a matmul with an in x out weight costs 2*in*out FLOPs per token forward
//     (multiply + add) and 4*in*out backward (input gradient and weight gradient), so
//     linear_flops_per_token = 6 * P, with P = all matmul weights (q, k, v, o, gate, up, down of
//     every layer and the LM head; the embedding lookup is no matmul).
//   Causal attention, per layer: query i attends to the keys j <= i, s(s+1)/2 pairs. Each pair
//   costs
//     2*q_dim for its score (q_i . k_j summed over all query heads; with GQA each query head still
//     does its own dot product) and 2*q_dim for its share of P.V: 4*q_dim forward. Backward does
//     dP = dO.V^T, dV = P^T.dO, dQ = dS.K, dK = dS^T.Q: 8*q_dim. So attention_flops_per_pair =
//     12 * q_dim * layers (softmax and flash-attention's recomputation not counted).
//   Total: linear*s + pair*s(s+1)/2 = (pair/2)*s^2 + (linear + pair/2)*s. Dividing by `linear`
//   (only ratios matter to the planner) gives a = pair/(2*linear), b = 1 + pair/(2*linear), so a
//   short sequence costs about its token count. E.g. a 7B LLaMA (P ~ 6.5e9, q_dim 4096, 32 layers):
//   a ~ 1.2e-4 per token^2, attention equals the linear cost at s ~ 8K tokens.
CostModel CostModel::flops(double linear_flops_per_token, double attention_flops_per_pair) {
  if (!std::isfinite(linear_flops_per_token) || linear_flops_per_token <= 0.0 ||
      !std::isfinite(attention_flops_per_pair) || attention_flops_per_pair < 0.0) {
    fail(
        "flops cost model needs linear FLOPs per token > 0 and attention FLOPs per pair >= 0; "
        "got {} and {}",
        linear_flops_per_token, attention_flops_per_pair);
  }
  const double half_ratio = attention_flops_per_pair / (2.0 * linear_flops_per_token);
  return CostModel{"flops", half_ratio, 1.0 + half_ratio};
}

// Minimizes sum (a*s^2 + b*s - y)^2 subject to a, b >= 0. With u = s / s_max (for conditioning:
// s^4 of 64K-token sequences is 1.8e19) the unconstrained optimum solves the 2x2 normal equations
// [Su4 Su3; Su3 Su2] [a'; b'] = [Su2y; Suy]. If a coefficient comes out negative, the constrained
// optimum lies on that boundary: clamp it to 0 and refit the other alone (1-D least squares).
CostModel fit_quadratic(const std::vector<std::int64_t>& lengths,
                        const std::vector<double>& seconds) {
  if (lengths.size() != seconds.size()) {
    fail("fit_quadratic: {} lengths but {} timings; expected one timing per length", lengths.size(),
         seconds.size());
  }
  std::int64_t longest = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] < 1) fail("fit_quadratic: point {} has length {}; expected >= 1", i, lengths[i]);
    if (!std::isfinite(seconds[i])) fail("fit_quadratic: point {} has time {}", i, seconds[i]);
    longest = std::max(longest, lengths[i]);
  }
  std::vector<std::int64_t> distinct = lengths;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  if (distinct.size() < 2) {
    fail("fit_quadratic: needs timings at >= 2 distinct lengths to separate a*s^2 from b*s; got {}",
         distinct.size());
  }
  const auto scale = static_cast<double>(longest);
  double su2 = 0, su3 = 0, su4 = 0, su2y = 0, suy = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    const double u = static_cast<double>(lengths[i]) / scale;
    su2 += u * u;
    su3 += u * u * u;
    su4 += u * u * u * u;
    suy += u * seconds[i];
    su2y += u * u * seconds[i];
  }
  const double det = su4 * su2 - su3 * su3;  // > 0 by Cauchy-Schwarz with 2 distinct lengths
  double a = (su2y * su2 - suy * su3) / det;
  double b = (su4 * suy - su3 * su2y) / det;
  if (a < 0.0) {
    a = 0.0;
    b = std::max(suy / su2, 0.0);
  } else if (b < 0.0) {
    b = 0.0;
    a = std::max(su2y / su4, 0.0);
  }
  if (!(a > 0.0) && !(b > 0.0)) {
    fail(
        "fit_quadratic: no positive cost fits the timings (best fit a = b = 0); are the times "
        "positive?");
  }
  return CostModel{"quadratic", a / (scale * scale), b / scale};
}

std::vector<std::vector<std::int64_t>> karmarkar_karp(const std::vector<double>& costs, int k,
                                                      bool equal_size) {
  if (k < 1) fail("karmarkar_karp: number of parts must be >= 1, got {}", k);
  check_costs(costs);
  return karmarkar_karp_impl(costs, static_cast<std::size_t>(k), equal_size);
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
  refine(costs, parts, equal_size);
}

Plan make_plan(const PlanInput& input) {
  validate(input);
  const auto n = input.lengths.size();
  const auto ranks = static_cast<std::size_t>(input.world_size);
  std::vector<double> costs(n);
  for (std::size_t i = 0; i < n; ++i) costs[i] = input.cost.cost(input.lengths[i]);

  Plan plan;
  plan.ranks.reserve(ranks);
  if (input.balance == Balance::local_sort) {
    // One sequence per microbatch, longest first (every rank sorts the same way, so the m-th
    // microbatches of all ranks are alike; longest first surfaces memory trouble at once).
    for (const auto& items : round_robin(n, ranks)) {
      Parts singles;
      for (Index i : items) singles.push_back({i});
      std::sort(singles.begin(), singles.end(), [&](const auto& x, const auto& y) {
        const auto lx = input.lengths[as_size(x[0])];
        const auto ly = input.lengths[as_size(y[0])];
        return lx != ly ? lx > ly : x[0] < y[0];
      });
      RankPlan rank;
      rank.cost = set_cost(costs, items);
      for (auto& single : singles) {
        rank.microbatch_costs.push_back(costs[as_size(single[0])]);
        rank.microbatches.push_back(std::move(single));
      }
      plan.ranks.push_back(std::move(rank));
    }
    return plan;
  }

  const Parts split = input.balance == Balance::lb_micro ? equal_count_split(costs, ranks)
                                                         : free_count_split(costs, ranks);
  std::vector<Parts> packed(ranks);
  for (std::size_t r = 0; r < ranks; ++r) {
    packed[r] = minimal_microbatches(RankItems{split[r], input.lengths, costs, input.token_cap});
  }
  if (input.balance == Balance::lb_micro) {
    // Collectives need the same count everywhere: the largest minimal count, for every rank.
    std::size_t common = 0;
    for (const auto& p : packed) common = std::max(common, p.size());
    for (std::size_t r = 0; r < ranks; ++r) {
      if (packed[r].size() == common) continue;
      packed[r] = exact_microbatches(RankItems{split[r], input.lengths, costs, input.token_cap},
                                     common, std::move(packed[r]));
    }
  }
  for (std::size_t r = 0; r < ranks; ++r) {
    plan.ranks.push_back(finish_rank(costs, split[r], std::move(packed[r])));
  }
  return plan;
}

// Both bubbles are computed as 1 - S / (D * X) from the same S = sum_d C_d, with X = max_d C_d
// (odc) or sum_m max_d c_{m,d} (collective). Mathematically the latter X is >= the former; taking
// the max of the two guards the rounding of the differently ordered sums, so that the computed
// bubble_collective >= bubble_odc holds exactly (rounding is monotone).
double Plan::makespan_odc() const {
  double worst = 0.0;
  for (const auto& rank : ranks) worst = std::max(worst, rank.cost);
  return worst;
}

double Plan::makespan_collective() const {
  std::size_t steps = 0;
  for (const auto& rank : ranks) {
    ODC_CHECK(rank.microbatch_costs.size() == rank.microbatches.size(),
              "{} microbatch costs for {} microbatches", rank.microbatch_costs.size(), rank.microbatches.size());
    steps = std::max(steps, rank.microbatch_costs.size());
  }
  double barriers = 0.0;
  for (std::size_t m = 0; m < steps; ++m) {
    double slowest = 0.0;
    for (const auto& rank : ranks) {
      if (m < rank.microbatch_costs.size()) slowest = std::max(slowest, rank.microbatch_costs[m]);
    }
    barriers += slowest;
  }
  // Round-off in the sums must not make a barrier schedule look faster than the slowest rank.
  return std::max(barriers, makespan_odc());
}

namespace {
double bubble_of(const std::vector<RankPlan>& ranks, double makespan) {
  if (!(makespan > 0.0)) return 0.0;
  double total = 0.0;
  for (const auto& rank : ranks) total += rank.cost;
  return 1.0 - total / (static_cast<double>(ranks.size()) * makespan);
}
}  // namespace

double Plan::bubble_odc() const { return bubble_of(ranks, makespan_odc()); }

double Plan::bubble_collective() const { return bubble_of(ranks, makespan_collective()); }

std::int64_t Plan::max_microbatches() const {
  std::size_t most = 0;
  for (const auto& rank : ranks) most = std::max(most, rank.microbatches.size());
  return static_cast<std::int64_t>(most);
}

std::uint64_t Plan::hash() const {
  Fnv1a h;
  h.add_value(static_cast<std::int64_t>(ranks.size()));
  for (const auto& rank : ranks) {
    h.add_value(static_cast<std::int64_t>(rank.microbatches.size()));
    for (const auto& mb : rank.microbatches) {
      h.add_value(static_cast<std::int64_t>(mb.size()));
      for (Index i : mb) h.add_value(i);
    }
  }
  return h.value();
}

}  // namespace odc::data
