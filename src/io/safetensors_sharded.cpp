// Sharded safetensors checkpoints (Hugging Face layout): model-0000K-of-0000N.safetensors files
// plus model.safetensors.index.json mapping every tensor to its file.
#include "odc/io/safetensors_sharded.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "odc/core/error.h"

namespace odc::io {

namespace fs = std::filesystem;

namespace {

nlohmann::json read_index_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("safetensors index '{}': cannot open", path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("safetensors index '{}': not valid JSON: {}", path, e.what());
  }
}

// Shard names are plain file names next to the index: a path that climbs out of the checkpoint
// directory (or an absolute one) in a downloaded index must not make us read arbitrary files.
void check_shard_name(const std::string& index, const std::string& tensor, const std::string& file) {
  if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..") {
    fail("safetensors index '{}': tensor '{}' maps to '{}', expected a file name in the index's "
         "directory", index, tensor, file);
  }
}

std::uint64_t entry_bytes(const SafetensorsEntry& t) {
  return static_cast<std::uint64_t>(shape_numel(t.shape)) * dtype_size(t.dtype);
}

}  // namespace

SafetensorsShards::SafetensorsShards(const std::string& path) : path_(path) {
  if (!path.ends_with(".json")) {
    files_.emplace_back(path);
    for (const auto& name : files_.front().names()) file_of_.emplace(name, 0);
    return;
  }
  sharded_ = true;
  const nlohmann::json index = read_index_json(path);
  if (!index.is_object()) fail("safetensors index '{}': not a JSON object", path);
  if (index.contains("metadata") && !index.at("metadata").is_object() && !index.at("metadata").is_null()) {
    fail("safetensors index '{}': \"metadata\" is not an object", path);
  }
  // metadata.total_size is informational: published indexes disagree on whether it counts
  // deduplicated or padded bytes, so it is not compared against the shards.
  if (!index.contains("weight_map") || !index.at("weight_map").is_object()) {
    fail("safetensors index '{}': missing \"weight_map\" object ({{tensor name: shard file}})", path);
  }
  const auto& weight_map = index.at("weight_map");
  if (weight_map.empty()) fail("safetensors index '{}': \"weight_map\" lists no tensors", path);

  // Shard file -> tensors the index maps to it (files in name order: HF's numbering sorts).
  std::map<std::string, std::vector<std::string>> by_file;
  for (const auto& [tensor, file] : weight_map.items()) {
    if (!file.is_string()) {
      fail("safetensors index '{}': tensor '{}' maps to {}, expected a file name", path, tensor, file.dump());
    }
    check_shard_name(path, tensor, file.get<std::string>());
    by_file[file.get<std::string>()].push_back(tensor);
  }
  const fs::path dir = fs::path(path).parent_path();
  for (const auto& [file, tensors] : by_file) {
    const std::string shard_path = (dir / file).string();
    std::error_code ec;
    if (!fs::exists(shard_path, ec)) {
      fail("safetensors index '{}': shard '{}' (holding tensor '{}' and {} more) does not exist", path,
           shard_path, tensors.front(), tensors.size() - 1);
    }
    files_.emplace_back(shard_path);
    const SafetensorsFile& shard = files_.back();
    const std::set<std::string> mapped(tensors.begin(), tensors.end());
    for (const auto& tensor : tensors) {
      if (!shard.contains(tensor)) {
        fail("safetensors index '{}': tensor '{}' is mapped to '{}', which does not contain it", path,
             tensor, shard_path);
      }
      file_of_.emplace(tensor, files_.size() - 1);
    }
    for (const auto& name : shard.names()) {
      if (!mapped.contains(name)) {
        const auto other = weight_map.find(name);
        fail("safetensors index '{}': shard '{}' holds tensor '{}', which the index {}", path, shard_path,
             name, other == weight_map.end() ? std::string("does not list")
                                             : "maps to '" + other->get<std::string>() + "'");
      }
    }
  }
}

std::vector<std::string> SafetensorsShards::names() const {
  std::vector<std::string> out;
  for (const auto& file : files_) {
    auto names = file.names();
    out.insert(out.end(), std::make_move_iterator(names.begin()), std::make_move_iterator(names.end()));
  }
  return out;
}

const SafetensorsFile& SafetensorsShards::file_of(const std::string& name) const {
  const auto it = file_of_.find(name);
  if (it == file_of_.end()) {
    fail("safetensors checkpoint '{}': no tensor '{}' ({} tensors present)", path_, name, file_of_.size());
  }
  return files_[it->second];
}

SafetensorsShardPlan plan_safetensors_shards(const std::vector<SafetensorsEntry>& layout, std::int64_t max_shard_bytes,
                                             const std::vector<int>& groups) {
  if (max_shard_bytes <= 0) fail("safetensors shards: max shard size must be positive, got {}", max_shard_bytes);
  if (!groups.empty() && groups.size() != layout.size()) {
    fail("safetensors shards: {} group numbers for {} tensors", groups.size(), layout.size());
  }
  const auto group = [&](std::size_t i) { return groups.empty() ? static_cast<std::int64_t>(i) : groups[i]; };
  SafetensorsShardPlan plan;
  std::size_t shard = 0;
  std::uint64_t bytes_in_shard = 0;
  std::size_t groups_in_shard = 0;
  for (std::size_t i = 0; i < layout.size();) {
    std::size_t end = i;
    std::uint64_t bytes = 0;
    for (; end < layout.size() && group(end) == group(i); ++end) bytes += entry_bytes(layout[end]);
    if (groups_in_shard > 0 && bytes_in_shard + bytes > static_cast<std::uint64_t>(max_shard_bytes)) {
      ++shard;
      bytes_in_shard = 0;
      groups_in_shard = 0;
    }
    plan.file_of.insert(plan.file_of.end(), end - i, shard);
    bytes_in_shard += bytes;
    ++groups_in_shard;
    i = end;
  }
  const std::size_t count = shard + 1;
  for (std::size_t s = 0; s < count; ++s) {
    plan.files.push_back(count == 1 ? std::string(kSafetensorsSingleName)
                                    : fmt::format("model-{:05}-of-{:05}.safetensors", s + 1, count));
  }
  return plan;
}

std::string safetensors_index_text(const std::vector<SafetensorsEntry>& layout, const SafetensorsShardPlan& plan) {
  std::uint64_t total = 0;
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  for (std::size_t i = 0; i < layout.size(); ++i) {
    total += entry_bytes(layout[i]);
    weight_map[layout[i].name] = plan.files[plan.file_of[i]];
  }
  const nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  return index.dump(2) + "\n";
}

}  // namespace odc::io
