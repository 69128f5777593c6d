#pragma once
// Safetensors checkpoints in several files, the Hugging Face way: model-0000K-of-0000N.safetensors
// shards plus model.safetensors.index.json mapping every tensor to its file. Planning how a layout
// is split into shards (writing) and opening such a checkpoint (reading).
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "odc/io/safetensors.h"
#include "odc/io/safetensors_writer.h"

namespace odc::io {

// HF's file names: the index of a sharded checkpoint and the single file of an unsharded one.
inline constexpr char kSafetensorsIndexName[] = "model.safetensors.index.json";
inline constexpr char kSafetensorsSingleName[] = "model.safetensors";

// How a layout's tensors are split into files the way Hugging Face does: one file
// model.safetensors when the whole layout fits in `max_shard_bytes`, otherwise shards
// model-00001-of-0000N.safetensors holding at most max_shard_bytes of tensor data each (the
// header comes on top, as in transformers), filled greedily in layout order as transformers'
// save_pretrained does. A tensor larger than the limit gets a shard of its own. With `groups`
// (one number per tensor, equal for neighbours that must share a file: a model unit's tensors,
// which one rank writes), a group is placed as one tensor would be; empty: every tensor alone.
struct SafetensorsShardPlan {
  std::vector<std::string> files;    // file names, in order
  std::vector<std::size_t> file_of;  // the file of each layout entry
  bool sharded() const { return files.size() > 1; }
};
SafetensorsShardPlan plan_safetensors_shards(const std::vector<SafetensorsEntry>& layout, std::int64_t max_shard_bytes,
                                             const std::vector<int>& groups = {});
// The text of a sharded plan's model.safetensors.index.json: {"metadata": {"total_size": bytes},
// "weight_map": {tensor: file}}.
std::string safetensors_index_text(const std::vector<SafetensorsEntry>& layout, const SafetensorsShardPlan& plan);

// A model's tensors spread over one or more safetensors files: a single file, or the shards that
// a Hugging Face index (model.safetensors.index.json) lists. Opening validates that every file
// the index names exists and holds the tensors mapped to it, and that no shard holds a tensor the
// index does not map to it (a stale shard from another export would otherwise go unnoticed).
class SafetensorsShards {
 public:
  // `path` ending in ".json" is an index (shard names are relative to its directory); anything
  // else is a single safetensors file.
  explicit SafetensorsShards(const std::string& path);

  const std::string& path() const { return path_; }
  bool sharded() const { return sharded_; }
  const std::vector<SafetensorsFile>& files() const { return files_; }
  // Every tensor name, in file order and data order within each file.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return file_of_.count(name) != 0; }
  // The file holding tensor `name`; throws odc::Error naming the checkpoint and the tensor.
  const SafetensorsFile& file_of(const std::string& name) const;
  const SafetensorsTensorInfo& info(const std::string& name) const { return file_of(name).info(name); }

 private:
  std::string path_;
  bool sharded_ = false;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, std::size_t> file_of_;
};

}  // namespace odc::io
