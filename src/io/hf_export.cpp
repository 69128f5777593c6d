#include "odc/io/hf_export.h"

#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "odc/core/atomic_file.h"
#include "odc/core/error.h"
#include "odc/io/hf_checkpoint.h"

namespace odc::io {

namespace fs = std::filesystem;

namespace {

// Files of an HF model directory that belong to the tokenizer and generation defaults.
constexpr std::array<const char*, 4> kCopiedFiles = {
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"};
// config.json fields that give token ids their meaning (generation stops at eos).
constexpr std::array<const char*, 3> kTokenIdFields = {"bos_token_id", "eos_token_id", "pad_token_id"};

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open '{}'", path.string());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

fs::path target_path(const std::string& dir) {
  if (dir.empty()) fail("HF export: empty output directory name");
  fs::path target = fs::path(dir).lexically_normal();
  if (!target.has_filename()) target = target.parent_path();
  return target;
}

// An existing export target may be replaced only if it is (or was meant to be) an HF checkpoint:
// a typo in --out must never delete an unrelated directory.
void check_replaceable(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return;
  if (!fs::is_directory(dir, ec)) fail("HF export: '{}' exists and is not a directory", dir.string());
  if (fs::is_empty(dir, ec) || fs::exists(dir / "config.json", ec)) return;
  fail("HF export: '{}' exists and is not an HF checkpoint (no config.json); refusing to replace it",
       dir.string());
}

nlohmann::ordered_json export_config_json(const model::LlamaConfig& config, const std::string& architecture,
                                          DType dtype, const std::string& copy_from_dir) {
  const nlohmann::json fields = config.to_json();
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  j["architectures"] = {architecture};
  j["model_type"] = hf_model_type(architecture);
  j["torch_dtype"] = dtype_name(dtype);  // "float32", "bfloat16", "float16": HF's spellings
  // qk_norm and attention_window are ours, not HF fields: model_type qwen3 says the one, the
  // architecture's window fields (below) the other.
  for (const auto& [key, value] : fields.items()) {
    if (key != "architectures" && key != "model_type" && key != "qk_norm" && key != "attention_window") j[key] = value;
  }
  // HF's Mistral defaults to a 4096-token sliding window and Qwen2/Qwen3 may enable one. A model
  // without a window attends over the whole sequence: say so explicitly. One loaded with a window
  // (attention_window) gets it back, so that the export behaves as the original model: Mistral's
  // window is on every layer; Qwen2's on the layers from max_window_layers on, so 0 = all of them
  // (check_hf_architecture refuses a window for the other architectures).
  const std::int64_t window = config.attention_window;
  if (architecture == "MistralForCausalLM") j["sliding_window"] = window > 0 ? nlohmann::ordered_json(window) : nullptr;
  if (architecture == "Qwen2ForCausalLM") {
    j["use_sliding_window"] = window > 0;
    if (window > 0) {
      j["sliding_window"] = window;
      j["max_window_layers"] = 0;
    }
  }
  if (architecture == "Qwen3ForCausalLM") {
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
  }
  if (!copy_from_dir.empty() && fs::exists(fs::path(copy_from_dir) / "config.json")) {
    const fs::path path = fs::path(copy_from_dir) / "config.json";
    nlohmann::json source;
    try {
      source = nlohmann::json::parse(read_text(path));
    } catch (const nlohmann::json::exception& e) {
      fail("'{}' is not valid JSON: {}", path.string(), e.what());
    }
    for (const char* key : kTokenIdFields) {
      if (source.is_object() && source.contains(key)) j[key] = source.at(key);
    }
  }
  return j;
}

}  // namespace

std::vector<SafetensorsEntry> HfExportLayout::file_tensors(std::size_t file) const {
  std::vector<SafetensorsEntry> out;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (plan.file_of[i] == file) out.push_back(tensors[i]);
  }
  return out;
}

std::pair<int, int> HfExportLayout::file_units(std::size_t file) const {
  int first = -1;
  int end = -1;
  for (std::size_t u = 0; u < unit_file.size(); ++u) {
    if (unit_file[u] != file) continue;
    if (first < 0) first = static_cast<int>(u);
    end = static_cast<int>(u) + 1;
  }
  ODC_CHECK(first >= 0, "HF export: file {} of {} holds no unit", file, num_files());
  return {first, end};
}

HfExportLayout hf_export_layout(const model::LlamaConfig& config, DType dtype, std::int64_t max_shard_bytes) {
  HfExportLayout layout;
  layout.dtype = dtype;
  layout.units = model::build_unit_layouts(config);
  std::vector<int> groups;
  for (std::size_t u = 0; u < layout.units.size(); ++u) {
    for (const auto& slot : layout.units[u].tensors) {
      layout.tensors.push_back({slot.name, dtype, slot.shape, nullptr});
      groups.push_back(static_cast<int>(u));
    }
  }
  layout.plan = plan_safetensors_shards(layout.tensors, max_shard_bytes, groups);
  // A unit's tensors lie back to back in its file (units.h: slot offsets are contiguous), so its
  // element e is at the unit's offset + e * dtype_size.
  std::vector<std::uint64_t> file_bytes(layout.plan.files.size(), 0);
  std::size_t tensor = 0;
  for (const auto& unit : layout.units) {
    const std::size_t file = layout.plan.file_of[tensor];
    layout.unit_file.push_back(file);
    layout.unit_offset.push_back(file_bytes[file]);
    file_bytes[file] += static_cast<std::uint64_t>(unit.numel) * dtype_size(dtype);
    tensor += unit.tensors.size();
  }
  return layout;
}

std::map<std::string, std::string> hf_safetensors_metadata() { return {{"format", "pt"}}; }

void encode_f32(std::span<const float> values, DType dtype, std::byte* out) {
  if (dtype == DType::f32) {
    if (!values.empty()) std::memcpy(out, values.data(), values.size_bytes());
    return;
  }
  ODC_CHECK(dtype == DType::bf16 || dtype == DType::f16, "encode_f32: dtype {}", dtype_name(dtype));
  for (std::size_t i = 0; i < values.size(); ++i) {
    const std::uint16_t v = dtype == DType::bf16 ? f32_to_bf16(values[i]) : f32_to_f16(values[i]);
    std::memcpy(out + 2 * i, &v, 2);
  }
}

std::string hf_staging_path(const std::string& dir) { return target_path(dir).string() + ".tmp"; }

HfDirectoryWriter::HfDirectoryWriter(const std::string& dir, const model::LlamaConfig& config,
                                     const std::string& architecture, DType dtype, const std::string& copy_from) {
  const fs::path target = target_path(dir);
  target_ = target.string();
  where_ = fmt::format("HF export to '{}'", target_);
  try {
    (void)hf_model_type(architecture);
  } catch (const Error& e) {
    fail("{}: {}", where_, e.what());
  }
  config.validate(where_);
  check_hf_architecture(architecture, config, where_);
  if (dtype != DType::f32 && dtype != DType::bf16 && dtype != DType::f16) {
    fail("{}: dtype {} is not a checkpoint dtype (float32, bfloat16 or float16)", where_, dtype_name(dtype));
  }
  if (!copy_from.empty() && !fs::is_directory(copy_from)) {
    fail("{}: '{}' (to copy the tokenizer from) is not a directory", where_, copy_from);
  }
  check_replaceable(target);
  // Replacing an HF directory without another source keeps its tokenizer, generation defaults and
  // special token ids (they were deleted: a fine-tuned model exported over its base lost them).
  copy_from_ = !copy_from.empty() ? copy_from : fs::exists(target / "config.json") ? target_ : std::string();

  staging_ = hf_staging_path(dir);
  std::error_code ec;
  fs::remove_all(staging_, ec);  // left by an export that crashed
  fs::create_directories(staging_, ec);
  if (ec) fail("{}: cannot create '{}': {}", where_, staging_, ec.message());
  try {
    write_file_atomically((fs::path(staging_) / "config.json").string(),
                          export_config_json(config, architecture, dtype, copy_from_).dump(2) + "\n");
  } catch (const Error&) {
    fs::remove_all(staging_, ec);  // a constructor that throws runs no destructor
    throw;
  }
}

HfDirectoryWriter::~HfDirectoryWriter() {
  if (!committed_) {
    std::error_code ignored;
    fs::remove_all(staging_, ignored);
  }
}

void HfDirectoryWriter::commit(const HfExportLayout& layout) {
  const fs::path staging(staging_);
  for (const auto& file : layout.plan.files) {
    if (!fs::exists(staging / file)) fail("{}: '{}' was not written", where_, (staging / file).string());
  }
  if (layout.plan.sharded()) {
    write_file_atomically((staging / kSafetensorsIndexName).string(), safetensors_index_text(layout.tensors, layout.plan));
  }
  if (!copy_from_.empty()) {
    for (const char* name : kCopiedFiles) {
      const fs::path source = fs::path(copy_from_) / name;
      if (fs::exists(source)) write_file_atomically((staging / name).string(), read_text(source));
    }
  }
  fsync_directory(staging_);

  const fs::path target(target_);
  const fs::path old = fs::path(target_ + ".old");
  std::error_code ec;
  const bool replacing = fs::exists(target);
  if (replacing) {
    fs::remove_all(old, ec);
    fs::rename(target, old, ec);
    if (ec) fail("{}: cannot move the previous export aside to '{}': {}", where_, old.string(), ec.message());
  }
  fs::rename(staging, target, ec);
  if (ec) fail("{}: cannot rename '{}' into place: {}", where_, staging_, ec.message());
  committed_ = true;
  const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
  fsync_directory(parent.string());
  if (replacing) fs::remove_all(old, ec);
}

void write_hf_checkpoint(const std::string& dir, const model::LlamaConfig& config, const std::string& architecture,
                         DType dtype, const std::function<void(int unit, float* out)>& full_unit,
                         std::int64_t max_shard_bytes, const std::string& copy_from) {
  HfDirectoryWriter out(dir, config, architecture, dtype, copy_from);
  const HfExportLayout layout = hf_export_layout(config, dtype, max_shard_bytes);
  std::vector<float> values;
  std::vector<std::byte> bytes;
  for (std::size_t f = 0; f < layout.num_files(); ++f) {
    SafetensorsPieceWriter file((fs::path(out.staging()) / layout.plan.files[f]).string(), layout.file_tensors(f),
                                hf_safetensors_metadata());
    const auto [first, end] = layout.file_units(f);
    for (int u = first; u < end; ++u) {
      const auto numel = static_cast<std::size_t>(layout.units[static_cast<std::size_t>(u)].numel);
      values.assign(numel, 0.0f);
      full_unit(u, values.data());
      bytes.resize(numel * dtype_size(dtype));
      encode_f32(values, dtype, bytes.data());
      file.write_at(layout.unit_offset[static_cast<std::size_t>(u)], bytes.data(), bytes.size());
    }
    file.commit();
  }
  out.commit(layout);
}

}  // namespace odc::io
