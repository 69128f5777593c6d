#pragma once
// ShardLayout: how every unit's flat buffer is split over the ranks. A unit of n elements is padded
// to a multiple of the world size and cut into equal contiguous shards; rank r owns
// [r * shard, (r + 1) * shard) of the padded buffer (FSDP's flat-parameter sharding).
#include <cstdint>
#include <string>
#include <vector>

#include "odc/model/units.h"

namespace odc::distributed {

struct UnitShard {
  std::string name;         // the unit's name (units.h), for messages and traces
  std::int64_t numel = 0;   // real elements of the unit
  std::int64_t padded = 0;  // numel rounded up to a multiple of the world size
  std::int64_t shard = 0;   // padded / world
};

// A run of this rank's shard with one weight-decay setting (AdamW treats norms/biases apart).
struct DecaySegment {
  std::int64_t begin = 0;  // offset inside the shard
  std::int64_t count = 0;
  bool weight_decay = false;
};

class ShardLayout {
 public:
  ShardLayout(const std::vector<model::UnitLayout>& units, int world_size, int rank);

  int world_size() const { return world_size_; }
  int rank() const { return rank_; }
  int num_units() const { return static_cast<int>(shards_.size()); }
  const UnitShard& unit(int u) const { return shards_.at(static_cast<std::size_t>(u)); }
  // Offset of rank r's shard inside unit u's padded buffer.
  std::int64_t shard_begin(int u, int r) const { return unit(u).shard * r; }
  // Segments of this rank's shard of unit u (padding is a no-decay segment of zeros).
  const std::vector<DecaySegment>& decay_segments(int u) const {
    return segments_.at(static_cast<std::size_t>(u));
  }
  std::int64_t owned_elements() const;
  // Offset of unit u's shard when a rank keeps its shards of every unit back to back (ShardStore,
  // native checkpoints): the shards of units 0..u-1. The same on every rank.
  std::int64_t owned_offset(int u) const { return owned_offsets_.at(static_cast<std::size_t>(u)); }
  std::int64_t largest_padded_unit() const;

 private:
  int world_size_;
  int rank_;
  std::vector<UnitShard> shards_;
  std::vector<std::int64_t> owned_offsets_;
  std::vector<std::vector<DecaySegment>> segments_;
};

}  // namespace odc::distributed
