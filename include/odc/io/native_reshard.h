#pragma once
// Resharding a native checkpoint (io/native_checkpoint.h) onto another number of ranks. Every unit
// is one flat buffer split into equal contiguous shards (distributed/shard_layout.h), so a new
// rank's shard of a unit is a window of that flat buffer that overlaps one or more of the old
// ranks' shards: it is copied from them piece by piece, for the masters and both AdamW moments
// alike. Padding past a unit's last element is zero in every layout.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "odc/distributed/shard/shard_layout.h"
#include "odc/io/native_checkpoint.h"
#include "odc/model/units.h"

namespace odc::io {

// Fills `out` (layout.owned_elements() floats each) with the state of rank layout.rank() of
// `layout`, from `checkpoint` written by manifest["world_size"] ranks over the same `units`. Only
// the old ranks' files that overlap are read, each checked against the manifest (checksum, finite
// values) as read_rank_shards checks it, streamed through in pieces: of an old rank's state only
// the windows this rank owns are kept. Every element of `out` is written (padding: zeros).
void read_resharded_shards(const std::string& checkpoint, const nlohmann::json& manifest,
                           const std::vector<model::UnitLayout>& units, const distributed::ShardLayout& layout,
                           const RankShardsOut& out);

// For odc-ckpt reshard: writes `checkpoint` (any world size) as a checkpoint for `world_size`
// ranks into `out_dir` (committed as step-N, the same step), with `manifest` — the source's
// manifest with whatever the caller adds — as its manifest. One new rank's state is held in
// memory at a time. Returns the new checkpoint's path.
std::string write_resharded_checkpoint(const std::string& checkpoint, const std::vector<model::UnitLayout>& units,
                                       int world_size, const std::string& out_dir, nlohmann::json manifest);

}  // namespace odc::io
