// The reference implementation's number partitioning (reference_planners.h): its Karmarkar-Karp
// and swap search, with its tie order, for its planners (reference_planners.cpp).
//
// Exactness: tests/parity/test_planner_reference.py re-derives the reference in Python and requires
// the plans built on this to equal it minibatch by minibatch (the same parts, in the same order).
// So every sum is taken as the reference takes it (a part's cost over its items by increasing
// index, a merged subset's as the first's plus the second's) and every tie is broken as it breaks
// them. Speed: the same results with less work than the reference's plain loops, so that its plan
// stays cheap enough to be a candidate of our planners at thousands of sequences:
//   - Karmarkar-Karp's tuples as heaps (kk_tuples.h);
//   - the swap search keeps the parts' order up to date instead of sorting it per swap, and with
//     many parts finds the first pair that has a swap from the items whose cost is near enough,
//     rather than trying every pair.
#include <algorithm>
#include <numeric>
#include <optional>
#include <utility>

#include "odc/core/error.h"
#include "odc/data/reference_planners.h"
#include "kk_tuples.h"
#include "planner_parts.h"

namespace odc::data {

namespace {

using planner_detail::as_size;
using planner_detail::Index;
using planner_detail::Parts;
using planner_detail::set_cost;
using planner_detail::Subset;
using planner_detail::Tuple;
using planner_detail::TupleQueue;
using planner_detail::merge_tuples;

// ---- Karmarkar-Karp -------------------------------------------------------------------------------

// The items (by (cost, index)) into k parts by decreasing cost, each ascending; `next` indexed by
// item, as scratch.
Parts karmarkar_karp(const std::vector<double>& costs, const std::vector<Index>& order, std::size_t k,
                     bool equal_size, std::vector<Index>& next) {
  const std::size_t n = order.size();
  Parts parts(k);
  if (n == 0) return parts;
  std::vector<Tuple> tuples;
  tuples.reserve(2 * n);
  TupleQueue queue;
  const std::size_t group = equal_size ? k : 1;
  for (std::size_t start = 0; start < n; start += group) {
    Tuple tuple;
    for (std::size_t j = start; j < std::min(n, start + group); ++j) {
      tuple.push({costs[as_size(order[j])], order[j], order[j]});
    }
    queue.add_initial(tuple.spread(k), tuples.size());
    tuples.push_back(std::move(tuple));
  }
  queue.start();
  while (queue.size() > 1) {
    Tuple a = std::move(tuples[queue.pop()]);
    Tuple b = std::move(tuples[queue.pop()]);
    merge_tuples(a, b, k, next);  // the first taken leads, as in the reference
    queue.push(a.spread(k), tuples.size());
    tuples.push_back(std::move(a));
  }
  const std::vector<Subset> last = tuples[queue.pop()].take_sorted();
  for (std::size_t p = 0; p < last.size(); ++p) {
    for (Index item = last[p].head;; item = next[as_size(item)]) {
      parts[p].push_back(item);
      if (item == last[p].tail) break;
    }
    std::sort(parts[p].begin(), parts[p].end());
  }
  return parts;
}

// ---- the swap search ------------------------------------------------------------------------------

struct Swap {
  Index x = -1;  // leaves the costlier part
  Index y = -1;  // leaves the cheaper part
};

// Parts with this many or more look for the first pair with a swap, after the first kDirectPairs of
// a sweep, through the items near in cost (Refiner::first_pair) instead of trying the pairs in turn:
// few items per part, many pairs.
constexpr std::size_t kManyParts = 32;
constexpr std::size_t kDirectPairs = 0;

class Refiner {
  // Items by (cost, index); parts by (cost, index), the reference's stable sort by cost.
  double cost(Index i) const { return costs_[as_size(i)]; }
  auto cheaper() const {
    return [this](Index x, Index y) { return cost(x) != cost(y) ? cost(x) < cost(y) : x < y; };
  }
  auto lighter() const {
    return [this](std::size_t p, std::size_t q) { return sums_[p] != sums_[q] ? sums_[p] < sums_[q] : p < q; };
  }

 public:
  // `order`: the parts' items by (cost, index); `part_of`: scratch indexed by item.
  Refiner(const std::vector<double>& costs, const std::vector<Index>& order, Parts& parts,
          std::vector<std::size_t>& part_of)
      : costs_(costs), all_by_cost_(order), parts_(parts), part_of_(part_of), k_(parts.size()) {
    by_cost_.resize(k_);
    sums_.resize(k_);
    for (std::size_t p = 0; p < k_; ++p) {
      for (const Index i : parts_[p]) part_of_[as_size(i)] = p;
      sums_[p] = set_cost(costs_, parts_[p]);
    }
    for (const Index i : all_by_cost_) by_cost_[part_of_[as_size(i)]].push_back(i);
    order_.resize(k_);
    std::iota(order_.begin(), order_.end(), std::size_t{0});
    std::sort(order_.begin(), order_.end(), lighter());
    position_.resize(k_);
    for (std::size_t j = 0; j < k_; ++j) position_[order_[j]] = j;
    max_swaps_ = 10 * (all_by_cost_.size() + k_);
  }

  // The reference's loop: the pairs (costliest, each other by increasing cost), then (each other
  // by decreasing cost, cheapest); in the first with a swap, its best one; until none applies.
  void run() {
    for (std::size_t swaps = 0; swaps < max_swaps_ && k_ > 1; ++swaps) {
      const std::size_t top = order_[k_ - 1];
      const std::size_t bottom = order_[0];
      std::optional<std::size_t> j = first_pair(true);
      if (j) {
        apply(top, order_[*j]);
        continue;
      }
      j = first_pair(false);
      if (!j) return;
      apply(order_[*j], bottom);
    }
  }

 private:
  // The reference's test: a swap moving d = cost(x) - cost(y) from hi to lo, 0 < d <= gap / 2.
  bool valid(Index x, Index y, std::size_t hi, std::size_t lo) const {
    const double gap = sums_[hi] - sums_[lo];
    const double d = cost(x) - cost(y);
    return gap > 0 && d > 0 && d <= gap / 2;
  }

  // The largest d of pair (hi, lo), the smallest x then y on a tie; y's valid for an x form one run
  // of lo's items by cost (d falls as cost(y) rises), whose first cost gives x's largest d.
  Swap best_swap(std::size_t hi, std::size_t lo) const {
    const std::vector<Index>& ys = by_cost_[lo];
    const double half = (sums_[hi] - sums_[lo]) / 2;
    Swap best;
    double best_d = 0.0;
    for (const Index x : parts_[hi]) {
      const double cx = cost(x);
      const auto end = std::partition_point(ys.begin(), ys.end(), [&](Index y) { return cost(y) < cx; });
      auto at = std::partition_point(ys.begin(), end, [&](Index y) { return cx - cost(y) > half; });
      if (at == end) continue;
      const double d = cx - cost(*at);
      if (best.x >= 0 && d < best_d) continue;
      Index y = *at;  // each equal-cost run's first has its smallest index
      const auto past_run = [&](auto from) {
        const double c = cost(*from);
        return std::partition_point(from, end, [&](Index z) { return cost(z) == c; });
      };
      for (at = past_run(at); at != end && cx - cost(*at) == d; at = past_run(at)) y = std::min(y, *at);
      if (best.x < 0 || d > best_d) {  // on a tie the earlier x (the items are by increasing index)
        best = {x, y};
        best_d = d;
      }
    }
    return best;
  }

  // from_top: the position j in order_ of the first part lo such that (costliest, lo) has a swap;
  // else the last position j such that (order_[j], cheapest) has one. None: no pair of the sweep.
  std::optional<std::size_t> first_pair(bool from_top) const {
    const std::size_t top = order_[k_ - 1];
    const std::size_t bottom = order_[0];
    // The first pairs one by one (the swap is most often there), all of them with few parts.
    const std::size_t direct = k_ < kManyParts ? k_ - 1 : kDirectPairs;
    for (std::size_t s = 0; s < direct; ++s) {
      const std::size_t j = from_top ? s : k_ - 1 - s;
      const std::size_t hi = from_top ? top : order_[j];
      const std::size_t lo = from_top ? order_[j] : bottom;
      if (sums_[hi] - sums_[lo] > 0 && best_swap(hi, lo).x >= 0) return j;
    }
    if (direct == k_ - 1) return std::nullopt;
    // A valid swap for a pair is valid with the largest gap too (top against bottom), so the
    // candidates are the items within half of that gap below (from_top: of the top's items) or
    // above (of the bottom's items) in cost; those of the pairs tried above are not valid.
    const double half = (sums_[top] - sums_[bottom]) / 2;
    if (!(half > 0)) return std::nullopt;
    std::optional<std::size_t> found;
    const auto begin = all_by_cost_.begin();
    const auto end = all_by_cost_.end();
    for (const Index mine : parts_[from_top ? top : bottom]) {
      const double c = cost(mine);
      if (from_top) {
        auto it = std::partition_point(begin, end, [&](Index y) { return c - cost(y) > half; });
        for (; it != end && cost(*it) < c; ++it) {
          const std::size_t p = part_of_[as_size(*it)];
          if (p != top && valid(mine, *it, top, p) && (!found || position_[p] < *found)) found = position_[p];
        }
      } else {
        auto it = std::partition_point(begin, end, [&](Index x) { return cost(x) <= c; });
        for (; it != end && cost(*it) - c <= half; ++it) {
          const std::size_t p = part_of_[as_size(*it)];
          if (p != bottom && valid(*it, mine, p, bottom) && (!found || position_[p] > *found)) found = position_[p];
        }
      }
    }
    return found;
  }

  void apply(std::size_t hi, std::size_t lo) {
    const Swap s = best_swap(hi, lo);
    ODC_CHECK(s.x >= 0, "reference refinement: no swap in the pair found to have one");
    for (const std::size_t p : {hi, lo}) order_.erase(std::find(order_.begin(), order_.end(), p));
    exchange(hi, s.x, s.y);
    exchange(lo, s.y, s.x);
    for (const std::size_t p : {hi, lo}) order_.insert(std::upper_bound(order_.begin(), order_.end(), p, lighter()), p);
    for (std::size_t j = 0; j < k_; ++j) position_[order_[j]] = j;
  }
  void exchange(std::size_t p, Index out, Index in) {
    auto& part = parts_[p];
    part.erase(std::find(part.begin(), part.end(), out));
    part.insert(std::upper_bound(part.begin(), part.end(), in), in);
    auto& by = by_cost_[p];
    by.erase(std::find(by.begin(), by.end(), out));
    by.insert(std::upper_bound(by.begin(), by.end(), in, cheaper()), in);
    part_of_[as_size(in)] = p;
    sums_[p] = set_cost(costs_, part);
  }

  const std::vector<double>& costs_;
  const std::vector<Index>& all_by_cost_;  // every item by (cost, index)
  Parts& parts_;
  std::vector<std::size_t>& part_of_;      // by item
  std::size_t k_;
  Parts by_cost_;                          // each part's items by (cost, index)
  std::vector<double> sums_;               // each part's cost, summed by increasing index
  std::vector<std::size_t> order_;         // the parts by (cost, index): the reference's stable sort
  std::vector<std::size_t> position_;      // each part's place in order_
  std::size_t max_swaps_ = 0;
};

}  // namespace

namespace planner_detail {

ReferencePartitioner::ReferencePartitioner(const std::vector<double>& costs)
    : costs_(costs), next_(costs.size(), -1), part_of_(costs.size(), 0) {}

std::vector<Index> ReferencePartitioner::by_cost(std::vector<Index> items) const {
  std::sort(items.begin(), items.end(), [&](Index x, Index y) {
    const double cx = costs_[as_size(x)];
    const double cy = costs_[as_size(y)];
    return cx != cy ? cx < cy : x < y;
  });
  return items;
}

Parts ReferencePartitioner::partition(const std::vector<Index>& by_cost, std::size_t k, bool equal_size) {
  ODC_CHECK(k >= 1 && (!equal_size || by_cost.size() % k == 0), "reference partition: {} items into {} parts{}",
            by_cost.size(), k, equal_size ? " of equal size" : "");
  Parts parts = karmarkar_karp(costs_, by_cost, k, equal_size, next_);
  Refiner(costs_, by_cost, parts, part_of_).run();
  return parts;
}

}  // namespace planner_detail

std::vector<std::vector<std::int64_t>> reference_partition(const std::vector<double>& costs,
                                                           const std::vector<std::int64_t>& items, std::size_t k,
                                                           bool equal_size) {
  planner_detail::ReferencePartitioner partitioner(costs);
  return partitioner.partition(partitioner.by_cost(items), k, equal_size);
}

}  // namespace odc::data
