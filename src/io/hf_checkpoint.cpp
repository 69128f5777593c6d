#include "odc/io/hf_checkpoint.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "odc/core/error.h"
#include "odc/io/checkpoint_format.h"

namespace odc::io {

namespace fs = std::filesystem;

namespace {

struct Architecture {
  const char* name;
  const char* model_type;
};
constexpr std::array<Architecture, 4> kArchitectures = {{
    {"LlamaForCausalLM", "llama"},
    {"MistralForCausalLM", "mistral"},
    {"Qwen2ForCausalLM", "qwen2"},
    {"Qwen3ForCausalLM", "qwen3"},
}};

// Buffers transformers registers on the module but that hold no weights (older exports saved them).
bool ignorable_buffer(const std::string& name) {
  for (const char* suffix : {"rotary_emb.inv_freq", "rotary_emb.cos_cached", "rotary_emb.sin_cached"}) {
    if (name.ends_with(suffix)) return true;
  }
  return false;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open '{}'", path.string());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

nlohmann::json read_json(const fs::path& path) {
  const std::string text = read_text(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("'{}' is not valid JSON: {}", path.string(), e.what());
  }
}

std::string architecture_of(const nlohmann::json& j, const std::string& where) {
  if (j.contains("architectures") && !j.at("architectures").is_null()) {
    const auto& list = j.at("architectures");
    if (!list.is_array() || list.empty() || !list.front().is_string()) {
      fail("{}: \"architectures\" must be a list of names such as [\"LlamaForCausalLM\"], found {}", where,
           list.dump());
    }
    return list.front().get<std::string>();
  }
  if (j.contains("model_type") && j.at("model_type").is_string()) {
    const auto type = j.at("model_type").get<std::string>();
    for (const auto& a : kArchitectures) {
      if (type == a.model_type) return a.name;
    }
    fail("{}: model_type '{}' is not supported (supported architectures: {})", where, type,
         supported_hf_architectures());
  }
  fail("{}: neither \"architectures\" nor \"model_type\" says which model this is (supported: {})", where,
       supported_hf_architectures());
}

// The safetensors of an HF directory: the index when there is one (transformers prefers it).
std::string safetensors_path(const std::string& dir) {
  std::error_code ec;
  const fs::path index = fs::path(dir) / kSafetensorsIndexName;
  if (fs::exists(index, ec)) return index.string();
  const fs::path single = fs::path(dir) / kSafetensorsSingleName;
  if (fs::exists(single, ec)) return single.string();
  const bool pickle = fs::exists(fs::path(dir) / "pytorch_model.bin", ec) ||
                      fs::exists(fs::path(dir) / "pytorch_model.bin.index.json", ec);
  fail("HF checkpoint '{}': no {} or {}{}", dir, kSafetensorsSingleName, kSafetensorsIndexName,
       pickle ? " (only PyTorch pickle weights, pytorch_model.bin, which are not supported: convert them "
                "to safetensors)" : "");
}

// The sliding window of a Mistral or Qwen2 config.json that makes the original model differ from
// full attention on a sequence it is meant for, else 0. As transformers (5.x): Mistral's
// sliding_window (default 4096, null = none) applies to every layer; Qwen2's (default 4096) only
// with use_sliding_window true, and only to the layers layer_types marks "sliding_attention", by
// default those from max_window_layers (default 28) on. A window of max_position_embeddings or
// more changes nothing the model is meant for. Qwen3's windows were checked layer by layer
// (LlamaConfig::from_json): one reaching a layer is refused, so any left changes nothing.
std::int64_t hf_sliding_window(const nlohmann::json& j, const std::string& architecture,
                               const model::LlamaConfig& config, const std::string& where) {
  const bool qwen2 = architecture == "Qwen2ForCausalLM";
  if (!qwen2 && architecture != "MistralForCausalLM") return 0;
  if (qwen2) {
    const auto use = j.find("use_sliding_window");
    if (use == j.end() || use->is_null()) return 0;
    if (!use->is_boolean()) fail("{}: use_sliding_window must be true or false, found {}", where, use->dump());
    if (!use->get<bool>()) return 0;
  }
  std::int64_t window = 4096;
  if (const auto field = j.find("sliding_window"); field != j.end()) {
    if (field->is_null()) return 0;
    if (!field->is_number_integer() || field->get<std::int64_t>() <= 0) {
      fail("{}: sliding_window must be a positive number of tokens or null (no window), found {}", where,
           field->dump());
    }
    window = field->get<std::int64_t>();
  }
  if (qwen2) {
    bool reaches = false;
    if (const auto types = j.find("layer_types"); types != j.end() && types->is_array()) {
      for (const auto& type : *types) reaches = reaches || type == "sliding_attention";
    } else {
      std::int64_t first = 28;
      if (const auto field = j.find("max_window_layers"); field != j.end() && !field->is_null()) {
        if (!field->is_number_integer()) {
          fail("{}: max_window_layers must be an integer, found {}", where, field->dump());
        }
        first = field->get<std::int64_t>();
      }
      reaches = first < config.num_hidden_layers;
    }
    if (!reaches) return 0;
  }
  return window < config.max_position_embeddings ? window : 0;
}

}  // namespace

std::string supported_hf_architectures() {
  std::string out;
  for (const auto& a : kArchitectures) out += (out.empty() ? "" : ", ") + std::string(a.name);
  return out;
}

std::string hf_model_type(const std::string& architecture) {
  for (const auto& a : kArchitectures) {
    if (architecture == a.name) return a.model_type;
  }
  fail("architecture '{}' is not supported (supported: {})", architecture, supported_hf_architectures());
}

std::string default_hf_architecture(const model::LlamaConfig& config) {
  if (config.qk_norm) return "Qwen3ForCausalLM";
  if (config.attention_bias) return "Qwen2ForCausalLM";
  return config.attention_window > 0 ? "MistralForCausalLM" : "LlamaForCausalLM";
}

void check_hf_architecture(const std::string& architecture, const model::LlamaConfig& config,
                              const std::string& where) {
  const bool qwen3 = architecture == "Qwen3ForCausalLM";
  if (qwen3 && !config.qk_norm) {
    fail("{}: Qwen3ForCausalLM always has the per-head q/k norms, but this model has none (qk_norm false; export "
         "it as {})", where, config.attention_bias ? "Qwen2ForCausalLM" : "LlamaForCausalLM");
  }
  if (!qwen3 && config.qk_norm) {
    fail("{}: {} has no q/k norms, but this model has them (qk_norm true): export it as Qwen3ForCausalLM", where,
         architecture);
  }
  if (qwen3 && config.attention_bias) {
    fail("{}: Qwen3ForCausalLM with attention_bias true also has an o_proj bias, which this model does not have "
         "(only attention_bias false is supported for Qwen3)", where);
  }
  if (architecture == "Qwen2ForCausalLM" && !config.attention_bias) {
    fail("{}: Qwen2ForCausalLM always has q/k/v biases, but attention_bias is false (export a model "
         "without biases as LlamaForCausalLM)", where);
  }
  if (architecture == "MistralForCausalLM" && config.attention_bias) {
    fail("{}: MistralForCausalLM has no attention biases, but attention_bias is true (export a model "
         "with q/k/v biases as Qwen2ForCausalLM)", where);
  }
  if (architecture == "LlamaForCausalLM" && config.attention_bias) {
    fail("{}: LlamaForCausalLM with attention_bias true also has an o_proj bias, which this model does "
         "not have (a model with q/k/v biases exports as Qwen2ForCausalLM)", where);
  }
  if (architecture == "LlamaForCausalLM" && config.attention_window > 0) {
    fail("{}: this model keeps the sliding window of {} tokens of the model it comes from (attention_window), "
         "which LlamaForCausalLM cannot express (it would attend over whole sequences): export it as "
         "MistralForCausalLM", where, config.attention_window);
  }
  if (qwen3 && config.attention_window > 0) {
    fail("{}: this model keeps a sliding window of {} tokens (attention_window), but Qwen3 sliding windows are not "
         "supported", where, config.attention_window);
  }
}

model::LlamaConfig hf_config_from_json(const nlohmann::json& config_json, const std::string& where,
                                       std::string* architecture_out) {
  if (!config_json.is_object()) fail("{}: not a JSON object", where);
  const std::string architecture = architecture_of(config_json, where);
  try {
    (void)hf_model_type(architecture);
  } catch (const Error& e) {
    fail("{}: {}", where, e.what());
  }
  // Non-strict: published config.json files carry many fields that do not affect the weights.
  // Qwen3's rules (q/k norms, head_dim 128 by default, sliding windows) follow its model_type,
  // which the architecture decides here as for every other rule. attention_window is the model
  // config's field, not config.json's: the window comes from the HF fields (below).
  nlohmann::json fields = config_json;
  fields.erase("attention_window");
  if (architecture == "Qwen3ForCausalLM" && fields.value("model_type", std::string()) != "qwen3") {
    fields["model_type"] = "qwen3";
  }
  model::LlamaConfig config = model::LlamaConfig::from_json(fields, where, false);
  if (architecture == "Qwen2ForCausalLM") config.attention_bias = true;
  if (architecture == "MistralForCausalLM") config.attention_bias = false;
  check_hf_architecture(architecture, config, where);

  const std::int64_t window = hf_sliding_window(config_json, architecture, config, where);
  // One that says otherwise is refused (odc-ckpt init --set model.config.attention_window would
  // otherwise be dropped).
  if (const auto given = config_json.find("attention_window");
      given != config_json.end() && !(given->is_number_integer() && given->get<std::int64_t>() == window)) {
    fail("{}: attention_window {} is not a Hugging Face config.json field, and this {} config's window is {}: "
         "config.json gives a window by sliding_window (MistralForCausalLM; Qwen2ForCausalLM with "
         "use_sliding_window true)",
         where, given->dump(), architecture,
         window > 0 ? fmt::format("sliding_window {}", window) : std::string("none"));
  }
  config.attention_window = window;
  if (window > 0) {
    spdlog::info("{}: sliding_window {}: sequences of up to {} tokens train exactly as in the original model "
                 "(attention spans whole sequences here, the original's the last {} tokens); longer ones are "
                 "refused", where, window, window, window);
  }
  if (architecture_out != nullptr) *architecture_out = architecture;
  return config;
}

HfCheckpoint::HfCheckpoint(const std::string& dir)
    : HfCheckpoint(dir, [&dir] {
        std::error_code ec;
        if (!fs::is_directory(dir, ec)) fail("HF checkpoint '{}': not a directory", dir);
        const fs::path path = fs::path(dir) / "config.json";
        if (!fs::exists(path, ec)) {
          refuse_native_where_hf_expected(dir, "HF checkpoint");  // the other format: say so
          fail("HF checkpoint '{}': missing config.json (a Hugging Face model directory holds "
               "config.json and model.safetensors)", dir);
        }
        return read_json(path);
      }()) {}

HfCheckpoint::HfCheckpoint(std::string dir, const nlohmann::json& config_json)
    : dir_(std::move(dir)),
      config_(hf_config_from_json(config_json, (fs::path(dir_) / "config.json").string(), &architecture_)),
      units_(model::build_unit_layouts(config_)),
      tensors_(safetensors_path(dir_)) {
  dtype_ = validate_tensors();
}

DType HfCheckpoint::validate_tensors() const {
  std::vector<std::string> problems;
  std::map<std::string, const model::TensorSlot*> expected;
  for (const auto& unit : units_) {
    for (const auto& slot : unit.tensors) expected.emplace(slot.name, &slot);
  }
  std::map<DType, std::int64_t> numel_by_dtype;
  for (const auto& name : tensors_.names()) {
    const SafetensorsFile& file = tensors_.file_of(name);
    const SafetensorsTensorInfo& info = file.info(name);
    const auto it = expected.find(name);
    if (it == expected.end()) {
      if (ignorable_buffer(name) || (name == "lm_head.weight" && config_.tie_word_embeddings)) continue;
      problems.push_back(fmt::format("unexpected tensor '{}' in '{}' (not part of a {} with this config)",
                                     name, file.path(), architecture_));
      continue;
    }
    const model::TensorSlot& slot = *it->second;
    if (info.dtype != DType::f32 && info.dtype != DType::bf16 && info.dtype != DType::f16) {
      problems.push_back(fmt::format("tensor '{}' in '{}' has dtype {}, expected F32, BF16 or F16", name,
                                     file.path(), safetensors_dtype_code(info.dtype)));
    }
    if (info.shape != slot.shape) {
      problems.push_back(fmt::format("tensor '{}' in '{}' has shape {}, but config.json implies {}", name,
                                     file.path(), shape_str(info.shape), shape_str(slot.shape)));
    }
    numel_by_dtype[info.dtype] += info.numel();
  }
  for (const auto& [name, slot] : expected) {
    if (!tensors_.contains(name)) {
      problems.push_back(fmt::format("missing tensor '{}' (shape {} required by config.json)", name,
                                     shape_str(slot->shape)));
    }
  }
  if (!problems.empty()) {
    std::sort(problems.begin(), problems.end());
    constexpr std::size_t kShown = 12;
    std::string list;
    for (std::size_t i = 0; i < std::min(problems.size(), kShown); ++i) list += "\n  " + problems[i];
    if (problems.size() > kShown) list += fmt::format("\n  ... and {} more", problems.size() - kShown);
    fail("HF checkpoint '{}' ({}) does not match its config.json: {} problem(s):{}", dir_,
         tensors_.path(), problems.size(), list);
  }
  if (numel_by_dtype.empty()) return DType::f32;
  return std::max_element(numel_by_dtype.begin(), numel_by_dtype.end(),
                          [](const auto& a, const auto& b) { return a.second < b.second; })
      ->first;
}

void HfCheckpoint::read_unit_range(int unit, std::int64_t offset, std::int64_t count, float* out) const {
  if (unit < 0 || unit >= static_cast<int>(units_.size())) {
    fail("HF checkpoint '{}': unit {} out of range (the model has {} units)", dir_, unit, units_.size());
  }
  if (offset < 0 || count < 0) {
    fail("HF checkpoint '{}': bad element range [{}, {}) of unit {}", dir_, offset, offset + count, unit);
  }
  const model::UnitLayout& layout = units_[static_cast<std::size_t>(unit)];
  const std::int64_t end = offset + count;
  for (const auto& slot : layout.tensors) {
    const std::int64_t lo = std::max(offset, slot.offset);
    const std::int64_t hi = std::min(end, slot.offset + slot.numel);
    if (lo >= hi) continue;
    const SafetensorsFile& file = tensors_.file_of(slot.name);
    float* values = out + (lo - offset);
    file.read_f32_range(slot.name, lo - slot.offset, hi - lo, values);
    // A NaN or inf weight would only show as a NaN loss (blamed on the learning rate or the data).
    for (std::int64_t i = 0; i < hi - lo; ++i) {
      if (!std::isfinite(values[i])) {
        fail("HF checkpoint '{}': tensor '{}' in '{}' holds a non-finite weight ({} at element {}): the "
             "checkpoint is damaged; re-download or re-export it",
             dir_, slot.name, file.path(), values[i], lo - slot.offset + i);
      }
    }
  }
  for (std::int64_t i = std::max(offset, layout.numel); i < end; ++i) out[i - offset] = 0.0f;
}

}  // namespace odc::io
