// Sharded safetensors checkpoints (Hugging Face layout): model-0000K-of-0000N.safetensors files
// plus model.safetensors.index.json mapping every tensor to its file.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "odc/core/atomic_file.h"
#include "odc/core/error.h"
#include "odc/io/safetensors.h"

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

ShardedSafetensorsWriter::ShardedSafetensorsWriter(std::string dir, std::vector<SafetensorsEntry> layout,
                                                   std::int64_t max_shard_bytes,
                                                   std::map<std::string, std::string> metadata)
    : dir_(std::move(dir)), layout_(std::move(layout)), metadata_(std::move(metadata)) {
  if (max_shard_bytes <= 0) fail("safetensors shards in '{}': max shard size must be positive, got {}", dir_, max_shard_bytes);
  // Duplicates across shards would not be caught by the per-file writers.
  std::set<std::string> seen;
  for (const auto& t : layout_) {
    if (!seen.insert(t.name).second) fail("safetensors shards in '{}': duplicate tensor '{}'", dir_, t.name);
  }
  // Greedy in layout order, as transformers' save_pretrained does: tensors stay in order and each
  // shard is filled until the next tensor would overflow it.
  std::size_t shard = 0;
  std::uint64_t bytes_in_shard = 0;
  std::size_t tensors_in_shard = 0;
  for (const auto& t : layout_) {
    const std::uint64_t bytes = entry_bytes(t);
    if (tensors_in_shard > 0 && bytes_in_shard + bytes > static_cast<std::uint64_t>(max_shard_bytes)) {
      ++shard;
      bytes_in_shard = 0;
      tensors_in_shard = 0;
    }
    shard_of_.push_back(shard);
    bytes_in_shard += bytes;
    ++tensors_in_shard;
  }
  const std::size_t count = shard + 1;
  for (std::size_t s = 0; s < count; ++s) {
    shard_files_.push_back(count == 1 ? std::string(kSafetensorsSingleName)
                                      : fmt::format("model-{:05}-of-{:05}.safetensors", s + 1, count));
  }
}

void ShardedSafetensorsWriter::open_shard(std::size_t shard) {
  std::vector<SafetensorsEntry> entries;
  for (std::size_t i = 0; i < layout_.size(); ++i) {
    if (shard_of_[i] == shard) entries.push_back(layout_[i]);
  }
  current_ = std::make_unique<SafetensorsStreamWriter>((fs::path(dir_) / shard_files_[shard]).string(),
                                                       entries, metadata_);
  current_shard_ = shard;
}

void ShardedSafetensorsWriter::write(const std::string& name, const void* data) {
  if (next_ >= layout_.size()) {
    fail("safetensors shards in '{}': tensor '{}' written, but all {} tensors are written", dir_, name,
         layout_.size());
  }
  const std::size_t shard = shard_of_[next_];
  if (!current_ || current_shard_ != shard) {
    if (current_) current_->commit();
    open_shard(shard);
  }
  current_->append(name, data);
  ++next_;
}

std::vector<std::string> ShardedSafetensorsWriter::finish() {
  if (next_ != layout_.size()) {
    fail("safetensors shards in '{}': finished after {} of {} tensors (next: '{}')", dir_, next_,
         layout_.size(), layout_[next_].name);
  }
  if (!current_) open_shard(0);  // no tensors at all: still one (empty) file
  current_->commit();
  current_.reset();
  std::vector<std::string> files = shard_files_;
  if (shard_files_.size() > 1) {
    std::uint64_t total = 0;
    nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
    for (std::size_t i = 0; i < layout_.size(); ++i) {
      total += entry_bytes(layout_[i]);
      weight_map[layout_[i].name] = shard_files_[shard_of_[i]];
    }
    const nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    write_file_atomically((fs::path(dir_) / kSafetensorsIndexName).string(), index.dump(2) + "\n");
    files.emplace_back(kSafetensorsIndexName);
  }
  return files;
}

std::vector<std::string> write_sharded_safetensors(const std::string& dir,
                                                   const std::vector<SafetensorsEntry>& tensors,
                                                   std::int64_t max_shard_bytes,
                                                   const std::map<std::string, std::string>& metadata) {
  ShardedSafetensorsWriter writer(dir, tensors, max_shard_bytes, metadata);
  for (const auto& t : tensors) writer.write(t.name, t.data);
  return writer.finish();
}

}  // namespace odc::io
