#include "odc/distributed/shard/shard_layout.h"

#include <algorithm>

#include "odc/core/error.h"

namespace odc::distributed {

ShardLayout::ShardLayout(const std::vector<model::UnitLayout>& units, int world_size, int rank)
    : world_size_(world_size), rank_(rank) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    fail("invalid rank {} of world size {}", rank, world_size);
  }
  for (const auto& u : units) {
    UnitShard s;
    s.name = u.name;
    s.numel = u.numel;
    s.padded = (u.numel + world_size - 1) / world_size * world_size;
    s.shard = s.padded / world_size;
    owned_offsets_.push_back(shards_.empty() ? 0 : owned_offsets_.back() + shards_.back().shard);
    shards_.push_back(s);

    // Intersect this rank's shard with the unit's tensors to know where weight decay applies.
    const std::int64_t lo = s.shard * rank;
    const std::int64_t hi = lo + s.shard;
    std::vector<DecaySegment> segs;
    auto add = [&](std::int64_t begin, std::int64_t end, bool decay) {
      if (begin >= end) return;
      if (!segs.empty() && segs.back().weight_decay == decay &&
          segs.back().begin + segs.back().count == begin - lo) {
        segs.back().count += end - begin;
      } else {
        segs.push_back({begin - lo, end - begin, decay});
      }
    };
    std::int64_t cursor = lo;
    for (const auto& t : u.tensors) {
      const std::int64_t b = std::max(lo, t.offset);
      const std::int64_t e = std::min(hi, t.offset + t.numel);
      if (b >= e) continue;
      add(cursor, b, false);
      add(b, e, t.weight_decay);
      cursor = e;
    }
    add(cursor, hi, false);
    segments_.push_back(std::move(segs));
  }
}

std::int64_t ShardLayout::owned_elements() const {
  std::int64_t n = 0;
  for (const auto& s : shards_) n += s.shard;
  return n;
}

std::int64_t ShardLayout::largest_padded_unit() const {
  std::int64_t n = 0;
  for (const auto& s : shards_) n = std::max(n, s.padded);
  return n;
}

}  // namespace odc::distributed
