#pragma once
// Karmarkar-Karp's partial solutions, shared by our partitioning (partition.cpp) and the
// reference's (reference_partition.cpp), which differ only in which tuple's subsets lead a union.
//
// A tuple is k disjoint subsets; it keeps only its non-empty ones (costs are >= 0 and an empty
// subset sorts last), in a heap whose top is its cheapest, and each subset's items as a linked list
// through a shared `next` array. Merging two tuples unites the i-th costliest subset of one with the
// (k-1-i)-th costliest of the other: with a heap, a single item joining a full tuple (the common
// case) costs O(log k) instead of moving the sorted subsets along.
#include <algorithm>
#include <cstddef>
#include <queue>
#include <vector>

#include "planner_parts.h"

namespace odc::data::planner_detail {

struct Subset {
  double sum = 0.0;
  Index head = -1;  // the item that leads its list: part of the order
  Index tail = -1;
};

// Decreasing cost, then smaller head: a total order (heads are distinct).
inline bool subset_before(const Subset& x, const Subset& y) {
  if (x.sum != y.sum) return x.sum > y.sum;
  return x.head < y.head;
}

struct Tuple {
  std::vector<Subset> heap;  // a heap under subset_before: the top is the last in that order
  double max_sum = 0.0;

  void push(const Subset& s) {
    heap.push_back(s);
    std::push_heap(heap.begin(), heap.end(), subset_before);
    max_sum = std::max(max_sum, s.sum);
  }
  Subset pop_cheapest() {
    std::pop_heap(heap.begin(), heap.end(), subset_before);
    const Subset s = heap.back();
    heap.pop_back();
    return s;
  }
  // The costliest subset's cost minus the cheapest's (an empty one's 0 when fewer than k).
  double spread(std::size_t k) const {
    if (heap.empty()) return 0.0;
    return max_sum - (heap.size() < k ? 0.0 : heap.front().sum);
  }
  // The subsets by subset_before, emptying the tuple.
  std::vector<Subset> take_sorted() {
    std::vector<Subset> out = std::move(heap);
    std::sort(out.begin(), out.end(), subset_before);
    heap.clear();
    return out;
  }
};

// Merges b into a: position i unites a's i-th costliest subset with b's (k-1-i)-th, a's leading
// the united list. Both are non-empty at u = |a| + |b| - k positions: a's t-th cheapest meets b's
// (u+1-t)-th cheapest; every other subset passes unchanged. b is left empty.
inline void merge_tuples(Tuple& a, Tuple& b, std::size_t k, std::vector<Index>& next) {
  const std::size_t total = a.heap.size() + b.heap.size();
  const std::size_t united = total > k ? total - k : 0;
  const auto unite = [&next](const Subset& x, const Subset& y) {
    next[as_size(x.tail)] = y.head;
    return Subset{x.sum + y.sum, x.head, y.tail};
  };
  if (united <= 1) {  // the common case (a single item joins), without the buffers below
    const double max_sum = std::max(a.max_sum, b.max_sum);
    if (united == 1) {
      const Subset x = a.pop_cheapest();
      const Subset y = b.pop_cheapest();
      const Subset u = unite(x, y);
      if (b.heap.size() > a.heap.size()) std::swap(a.heap, b.heap);
      for (const Subset& s : b.heap) a.push(s);
      a.push(u);
    } else {
      if (b.heap.size() > a.heap.size()) std::swap(a.heap, b.heap);
      for (const Subset& s : b.heap) a.push(s);
    }
    a.max_sum = std::max(a.max_sum, max_sum);
    b.heap.clear();
    b.max_sum = 0.0;
    return;
  }
  std::vector<Subset> low_a(united);
  std::vector<Subset> low_b(united);
  for (std::size_t t = 0; t < united; ++t) low_a[t] = a.pop_cheapest();
  for (std::size_t t = 0; t < united; ++t) low_b[t] = b.pop_cheapest();
  const double max_sum = std::max(a.max_sum, b.max_sum);  // a united subset exceeds both its parts
  if (b.heap.size() > a.heap.size()) std::swap(a.heap, b.heap);  // the larger heap receives
  for (const Subset& s : b.heap) a.push(s);
  for (std::size_t t = 0; t < united; ++t) a.push(unite(low_a[t], low_b[united - 1 - t]));
  a.max_sum = std::max(a.max_sum, max_sum);
  b.heap.clear();
  b.max_sum = 0.0;
}

// The tuples still to merge, largest spread first, then oldest (smallest id). The initial ones
// (known up front, most of them single items) wait in one array sorted once, the merged ones in a
// heap: the same order as one heap of all, without a heap operation per initial tuple.
class TupleQueue {
 public:
  struct Entry {
    double spread;
    std::size_t id;
  };
  void add_initial(double spread, std::size_t id) { initial_.push_back({spread, id}); }
  // After the last add_initial.
  void start() { std::sort(initial_.begin(), initial_.end(), first); }
  void push(double spread, std::size_t id) { merged_.push({spread, id}); }
  std::size_t size() const { return initial_.size() - next_ + merged_.size(); }
  std::size_t pop() {
    if (merged_.empty() || (next_ < initial_.size() && first(initial_[next_], merged_.top()))) return initial_[next_++].id;
    const std::size_t id = merged_.top().id;
    merged_.pop();
    return id;
  }

 private:
  static bool first(const Entry& x, const Entry& y) {
    if (x.spread != y.spread) return x.spread > y.spread;
    return x.id < y.id;
  }
  struct Later {
    bool operator()(const Entry& x, const Entry& y) const { return first(y, x); }
  };
  std::vector<Entry> initial_;
  std::size_t next_ = 0;
  std::priority_queue<Entry, std::vector<Entry>, Later> merged_;
};

}  // namespace odc::data::planner_detail
