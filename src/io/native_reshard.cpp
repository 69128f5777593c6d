#include "odc/io/native_reshard.h"

#include <algorithm>

#include "odc/core/error.h"

namespace odc::io {

namespace {

struct Window {
  std::int64_t begin = 0;  // element range of a unit's flat buffer
  std::int64_t end = 0;
};

// The real elements of unit u that rank r of `layout` holds (padding excluded).
Window owned_window(const distributed::ShardLayout& layout, int u, int r) {
  const auto& unit = layout.unit(u);
  const std::int64_t begin = std::min(unit.numel, unit.shard * r);
  return {begin, std::min(unit.numel, begin + unit.shard)};
}

}  // namespace

void read_resharded_shards(const std::string& checkpoint, const nlohmann::json& manifest,
                           const std::vector<model::UnitLayout>& units, const distributed::ShardLayout& layout,
                           const RankShardsOut& out) {
  const int old_world = manifest.at("world_size").get<int>();
  if (old_world < 1) fail("checkpoint '{}': world_size {} in its manifest", checkpoint, old_world);
  const distributed::ShardLayout old(units, old_world, 0);
  const auto need = static_cast<std::size_t>(layout.owned_elements());
  if (out.masters.size() != need || out.exp_avg.size() != need || out.exp_avg_sq.size() != need) {
    fail("checkpoint '{}': resharding needs buffers of {} elements for rank {}", checkpoint, need, layout.rank());
  }
  for (const auto target : {out.masters, out.exp_avg, out.exp_avg_sq}) std::fill(target.begin(), target.end(), 0.0f);

  const auto old_owned = static_cast<std::size_t>(old.owned_elements());
  std::vector<float> masters, exp_avg, exp_avg_sq;
  for (int q = 0; q < old_world; ++q) {
    bool overlaps = false;
    for (int u = 0; u < layout.num_units() && !overlaps; ++u) {
      const Window mine = owned_window(layout, u, layout.rank());
      const Window theirs = owned_window(old, u, q);
      overlaps = std::max(mine.begin, theirs.begin) < std::min(mine.end, theirs.end);
    }
    if (!overlaps) continue;
    masters.resize(old_owned);
    exp_avg.resize(old_owned);
    exp_avg_sq.resize(old_owned);
    read_rank_shards(checkpoint, manifest, q, {masters, exp_avg, exp_avg_sq});
    for (int u = 0; u < layout.num_units(); ++u) {
      const Window mine = owned_window(layout, u, layout.rank());
      const Window theirs = owned_window(old, u, q);
      const std::int64_t begin = std::max(mine.begin, theirs.begin);
      const std::int64_t end = std::min(mine.end, theirs.end);
      if (begin >= end) continue;
      // Offsets inside each rank's back-to-back shards.
      const std::int64_t from = old.owned_offset(u) + (begin - old.unit(u).shard * q);
      const std::int64_t to = layout.owned_offset(u) + (begin - layout.unit(u).shard * layout.rank());
      const auto count = static_cast<std::size_t>(end - begin);
      std::copy_n(masters.data() + from, count, out.masters.data() + to);
      std::copy_n(exp_avg.data() + from, count, out.exp_avg.data() + to);
      std::copy_n(exp_avg_sq.data() + from, count, out.exp_avg_sq.data() + to);
    }
  }
}

std::string write_resharded_checkpoint(const std::string& checkpoint, const std::vector<model::UnitLayout>& units,
                                       int world_size, const std::string& out_dir, nlohmann::json manifest) {
  if (world_size < 1) fail("reshard needs a world size >= 1, found {}", world_size);
  const nlohmann::json source = read_manifest(checkpoint);
  const std::int64_t step = source.at("step").get<std::int64_t>();
  for (int r = 0; r < world_size; ++r) {
    const distributed::ShardLayout layout(units, world_size, r);
    const auto owned = static_cast<std::size_t>(layout.owned_elements());
    std::vector<float> masters(owned), exp_avg(owned), exp_avg_sq(owned);
    read_resharded_shards(checkpoint, source, units, layout, {masters, exp_avg, exp_avg_sq});
    write_rank_shards(staging_path(out_dir, step), r, {masters, exp_avg, exp_avg_sq});
  }
  for (const char* key : {"ranks", "world_size", "step", "format_version"}) manifest.erase(key);
  return commit_checkpoint(out_dir, step, world_size, std::move(manifest), 0);
}

}  // namespace odc::io
