// Packing one rank's share of the minibatch into microbatches under the token cap: the fewest
// microbatches whose cost-balanced (Karmarkar-Karp, then refined) split respects the cap, with first-fit
// decreasing as the fallback; exactly m microbatches (LB-Micro's common count); or in sampler order
// without balancing (round_robin).
#include <algorithm>
#include <limits>
#include <utility>

#include "odc/core/error.h"
#include "odc/data/packing.h"
#include "planner_parts.h"

namespace odc::data::planner_detail {

std::int64_t RankItems::tokens(const std::vector<Index>& microbatch) const {
  std::int64_t total = 0;
  for (Index i : microbatch) total += lengths[as_size(i)];
  return total;
}

bool RankItems::fits(const Parts& microbatches) const {
  return std::all_of(microbatches.begin(), microbatches.end(),
                     [&](const std::vector<Index>& mb) { return tokens(mb) <= cap; });
}

Parts RankItems::kk(const std::vector<Index>& subset, std::size_t m, bool refined) const {
  std::vector<double> local(subset.size());
  for (std::size_t i = 0; i < subset.size(); ++i) local[i] = costs[as_size(subset[i])];
  Parts parts = karmarkar_karp_impl(local, m, false);
  // The swap-and-move refinement, as the ranks' split has it: a better balanced split fills its
  // microbatches' tokens more evenly too, so fewer counts overfill one (on long-tailed data the
  // unrefined split needed ~2% more microbatches than the reference's).
  if (refined) refine(local, parts, false);
  Parts result;
  for (auto& part : parts) {
    if (part.empty()) continue;
    for (Index& i : part) i = subset[as_size(i)];  // ascending local -> ascending global
    result.push_back(std::move(part));
  }
  return result;
}

namespace {

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

}  // namespace

// The smallest count m >= ceil(tokens / cap) whose KK cost partition respects the cap, searched
// upward from that lower bound (m = number of sequences always fits: KK then keeps every item
// alone); after kMaxKkAttempts counts, first-fit decreasing by tokens.
Parts minimal_microbatches(const RankItems& rank, bool refined) {
  if (rank.items.empty()) return {};
  const std::int64_t tokens = rank.tokens(rank.items);
  const auto count = rank.items.size();
  auto m = static_cast<std::size_t>(std::max<std::int64_t>((tokens + rank.cap - 1) / rank.cap, 1));
  for (int attempt = 0; attempt < kMaxKkAttempts && m <= count; ++attempt, ++m) {
    // The refined split first; the plain one where refining overfilled a microbatch in tokens.
    Parts candidate;
    if (refined) {
      candidate = rank.kk(rank.items, m);
      if (rank.fits(candidate)) return candidate;
    }
    candidate = rank.kk(rank.items, m, false);
    if (rank.fits(candidate)) return candidate;
  }
  return first_fit_decreasing(rank);
}

std::vector<Parts> common_count_microbatches(const std::vector<RankItems>& ranks) {
  std::size_t m = 1;
  std::size_t most = std::numeric_limits<std::size_t>::max();  // no rank can have more microbatches than sequences
  for (const auto& rank : ranks) {
    if (rank.items.empty()) return {};
    const std::int64_t tokens = rank.tokens(rank.items);
    m = std::max(m, static_cast<std::size_t>((tokens + rank.cap - 1) / rank.cap));
    most = std::min(most, rank.items.size());
  }
  for (int attempt = 0; attempt < kMaxKkAttempts && m <= most; ++attempt, ++m) {
    std::vector<Parts> all;
    bool ok = true;
    for (const auto& rank : ranks) {
      all.push_back(rank.kk(rank.items, m));
      if (all.back().size() != m || !rank.fits(all.back())) all.back() = rank.kk(rank.items, m, false);
      if (all.back().size() != m || !rank.fits(all.back())) {
        ok = false;
        break;
      }
    }
    if (ok) return all;
  }
  return {};
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

Parts in_order_microbatches(const RankItems& rank) {
  std::vector<std::int64_t> lengths;
  lengths.reserve(rank.items.size());
  for (Index i : rank.items) lengths.push_back(rank.lengths[as_size(i)]);
  Parts microbatches = pack_in_order(lengths, rank.cap);
  for (auto& mb : microbatches) {
    for (Index& i : mb) i = rank.items[as_size(i)];  // ascending local -> ascending global
  }
  return microbatches;
}

}  // namespace odc::data::planner_detail
