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
  // The buffers may be memory nothing wrote yet: the padding is written here, every real element
  // by the old rank that held it.
  for (int u = 0; u < layout.num_units(); ++u) {
    const Window mine = owned_window(layout, u, layout.rank());
    const std::int64_t real = mine.end - mine.begin;
    const auto at = static_cast<std::size_t>(layout.owned_offset(u) + real);
    const auto padding = static_cast<std::size_t>(layout.unit(u).shard - real);
    for (const auto target : {out.masters, out.exp_avg, out.exp_avg_sq}) {
      std::fill_n(target.begin() + static_cast<std::ptrdiff_t>(at), padding, 0.0f);
    }
  }
  for (int q = 0; q < old_world; ++q) {
    std::vector<ShardCopy> copies;
    for (int u = 0; u < layout.num_units(); ++u) {
      const Window mine = owned_window(layout, u, layout.rank());
      const Window theirs = owned_window(old, u, q);
      const std::int64_t begin = std::max(mine.begin, theirs.begin);
      const std::int64_t end = std::min(mine.end, theirs.end);
      if (begin >= end) continue;
      // Offsets inside each rank's back-to-back shards.
      copies.push_back({old.owned_offset(u) + (begin - old.unit(u).shard * q),
                        layout.owned_offset(u) + (begin - layout.unit(u).shard * layout.rank()), end - begin});
    }
    if (copies.empty()) continue;  // an old rank none of whose elements are ours: its file is not read
    read_rank_shard_pieces(checkpoint, manifest, q, old.owned_elements(), copies, out);
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
