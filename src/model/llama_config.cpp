#include "odc/model/llama_config.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "odc/core/error.h"

namespace odc::model {

namespace {

// Fields of LLaMA-family config.json files that do not change the computation (or that we check
// separately below). Accepted in strict mode; anything else unknown is rejected there.
const std::set<std::string>& known_unused_fields() {
  static const std::set<std::string> fields = {
      "architectures", "model_type", "torch_dtype", "bos_token_id", "eos_token_id",
      "pad_token_id", "transformers_version", "use_cache", "attention_dropout", "pretraining_tp",
      "hidden_act", "mlp_bias", "sliding_window", "use_sliding_window", "max_window_layers",
      "layer_types", "_name_or_path", "dtype"};
  return fields;
}

template <typename T>
T number_field(const nlohmann::json& j, const char* key, const std::string& where, T fallback,
               bool required) {
  if (!j.contains(key) || j.at(key).is_null()) {
    if (required) fail("{}: model config field '{}' is required", where, key);
    return fallback;
  }
  const auto& v = j.at(key);
  if constexpr (std::is_floating_point_v<T>) {
    if (!v.is_number()) fail("{}: model config field '{}' must be a number, found {}", where, key, v.dump());
    return v.get<T>();
  } else {
    if (!v.is_number_integer()) {
      fail("{}: model config field '{}' must be an integer, found {}", where, key, v.dump());
    }
    // The full range of the field's type, so no value wraps into a different (valid) shape: a
    // 32-bit field given 4294967297 must not become 1.
    constexpr auto lo = std::numeric_limits<T>::min();
    constexpr auto hi = std::numeric_limits<T>::max();
    const bool too_big_unsigned = v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(hi);
    if (too_big_unsigned || (!v.is_number_unsigned() && (v.get<std::int64_t>() < lo || v.get<std::int64_t>() > hi))) {
      fail("{}: model config field '{}' is {}, outside the range [{}, {}] it is held in", where, key, v.dump(), lo, hi);
    }
    return static_cast<T>(v.get<std::int64_t>());
  }
}

bool bool_field(const nlohmann::json& j, const char* key, const std::string& where, bool fallback) {
  if (!j.contains(key) || j.at(key).is_null()) return fallback;
  if (!j.at(key).is_boolean()) {
    fail("{}: model config field '{}' must be true or false, found {}", where, key, j.at(key).dump());
  }
  return j.at(key).get<bool>();
}

// The RoPE mapping `field` (rope_scaling of older files, or rope_parameters as transformers 5
// writes it) into c: its kind, the llama3 fields, and rope_theta when the mapping holds one (HF
// takes the mapping's rope_theta over the top-level field).
void parse_rope(const nlohmann::json& rs, const std::string& where, const char* field, LlamaConfig& c) {
  if (!rs.is_object()) fail("{}: {} must be a mapping or null", where, field);
  for (const auto& [key, value] : rs.items()) {
    if ((key == "full_attention" || key == "sliding_attention") && value.is_object()) {
      fail("{}: {} per layer type ('{}') is not supported: give one mapping for all layers", where, field, key);
    }
  }
  const std::string at = where + "." + field;
  if (rs.contains("rope_theta") && !rs.at("rope_theta").is_null()) {
    c.rope_theta = number_field<double>(rs, "rope_theta", at, c.rope_theta, true);
  }
  if (rs.contains("partial_rotary_factor") && !rs.at("partial_rotary_factor").is_null() &&
      number_field<double>(rs, "partial_rotary_factor", at, 1.0, true) != 1.0) {
    fail("{}: 'partial_rotary_factor' is {}, but rotary embeddings on part of each head are not supported (only 1.0)",
         at, rs.at("partial_rotary_factor").dump());
  }
  // A scaling without its kind (e.g. {factor: 8}) would silently be none at all; a mapping of
  // only rope_theta (rope_parameters) is the default kind.
  bool only_theta = true;
  for (const auto& [key, value] : rs.items()) only_theta &= key == "rope_theta" || key == "partial_rotary_factor";
  if (!only_theta && !rs.contains("type") && !rs.contains("rope_type")) {
    fail("{}: {} {} has no 'rope_type' (or 'type'), so which scaling it means is unknown (supported: "
         "default, llama3)",
         where, field, rs.dump());
  }
  // rope_type (current HF) wins over type (older configs); either must be a string.
  std::string type = "default";
  for (const char* key : {"type", "rope_type"}) {
    if (!rs.contains(key)) continue;
    if (!rs.at(key).is_string()) {
      fail("{}: {} field '{}' must be a string, found {}", where, field, key, rs.at(key).type_name());
    }
    type = rs.at(key).get<std::string>();
  }
  if (type != "default" && type != "llama3") {
    fail("{}: {} type '{}' is not supported (supported: default, llama3)", where, field, type);
  }
  c.rope_scaling.type = type;
  if (type == "llama3") {
    c.rope_scaling.factor = number_field<double>(rs, "factor", at, 1.0, true);
    c.rope_scaling.low_freq_factor = number_field<double>(rs, "low_freq_factor", at, 1.0, true);
    c.rope_scaling.high_freq_factor = number_field<double>(rs, "high_freq_factor", at, 4.0, true);
    c.rope_scaling.original_max_position_embeddings =
        number_field<double>(rs, "original_max_position_embeddings", at, 8192.0, true);
  }
}

// Qwen3 may make layers attend within a sliding window, which the model does not implement: such
// a config is refused, one whose fields leave every layer on full attention is accepted. As HF's
// Qwen3Config: the window is sliding_window (default 4096) only when use_sliding_window is true;
// layer i slides when layer_types[i] is "sliding_attention", by default when there is a window
// and i >= max_window_layers (default 28). A window covering max_position_embeddings is full
// attention for every sequence the model is meant for.
void check_qwen3_full_attention(const nlohmann::json& j, const LlamaConfig& c, const std::string& where) {
  std::int64_t window = -1;  // none
  if (bool_field(j, "use_sliding_window", where, false)) {
    window = 4096;
    if (j.contains("sliding_window")) {
      window = j.at("sliding_window").is_null() ? -1
                                                 : number_field<std::int64_t>(j, "sliding_window", where, 4096, true);
    }
  }
  std::vector<bool> sliding(static_cast<std::size_t>(c.num_hidden_layers), false);
  if (j.contains("layer_types") && !j.at("layer_types").is_null()) {
    const auto& types = j.at("layer_types");
    if (!types.is_array() || types.size() != sliding.size()) {
      fail("{}: layer_types must list one of \"full_attention\" or \"sliding_attention\" per layer ({} layers), "
           "found {}", where, c.num_hidden_layers, types.dump());
    }
    for (std::size_t i = 0; i < sliding.size(); ++i) {
      if (types[i] != "full_attention" && types[i] != "sliding_attention") {
        fail("{}: layer_types[{}] is {}, expected \"full_attention\" or \"sliding_attention\"", where, i,
             types[i].dump());
      }
      sliding[i] = types[i] == "sliding_attention";
    }
  } else if (window >= 0) {
    const auto first = number_field<std::int64_t>(j, "max_window_layers", where, 28, false);
    for (std::size_t i = 0; i < sliding.size(); ++i) sliding[i] = static_cast<std::int64_t>(i) >= first;
  }
  const auto it = std::find(sliding.begin(), sliding.end(), true);
  if (it == sliding.end()) return;
  const auto layer = it - sliding.begin();
  if (window < 0) {
    fail("{}: layer_types makes layer {} a sliding_attention layer, but there is no window (use_sliding_window "
         "false or sliding_window null): transformers refuses to run such a Qwen3 config; use full_attention",
         where, layer);
  }
  if (window < c.max_position_embeddings) {
    fail("{}: use_sliding_window is true with sliding_window {}: layer {} (and others) would attend only within the "
         "window, which is not implemented (attention spans whole sequences); set use_sliding_window to false, "
         "as Qwen3 checkpoints ship",
         where, window, layer);
  }
}

}  // namespace

LlamaConfig LlamaConfig::from_json(const nlohmann::json& j, const std::string& where, bool strict) {
  if (!j.is_object()) fail("{}: model config must be a mapping of config.json fields", where);
  LlamaConfig c;
  c.vocab_size = number_field<std::int64_t>(j, "vocab_size", where, 0, true);
  c.hidden_size = number_field<std::int64_t>(j, "hidden_size", where, 0, true);
  c.intermediate_size = number_field<std::int64_t>(j, "intermediate_size", where, 0, true);
  c.num_hidden_layers = number_field<int>(j, "num_hidden_layers", where, 0, true);
  c.num_attention_heads = number_field<int>(j, "num_attention_heads", where, 0, true);
  c.num_key_value_heads =
      number_field<int>(j, "num_key_value_heads", where, c.num_attention_heads, false);
  const bool explicit_head_dim = j.contains("head_dim") && !j.at("head_dim").is_null();
  c.head_dim = number_field<int>(j, "head_dim", where, 0, false);
  c.rms_norm_eps = number_field<double>(j, "rms_norm_eps", where, 1e-6, false);
  c.rope_theta = number_field<double>(j, "rope_theta", where, 10000.0, false);
  c.tie_word_embeddings = bool_field(j, "tie_word_embeddings", where, false);
  c.attention_bias = bool_field(j, "attention_bias", where, false);
  c.max_position_embeddings = number_field<std::int64_t>(j, "max_position_embeddings", where, 2048, false);
  c.initializer_range = number_field<double>(j, "initializer_range", where, 0.02, false);
  c.attention_window = number_field<std::int64_t>(j, "attention_window", where, 0, false);

  const std::string model_type =
      j.contains("model_type") && j.at("model_type").is_string() ? j.at("model_type").get<std::string>() : "";
  // Qwen2 checkpoints carry q/k/v biases without an attention_bias field.
  if (model_type == "qwen2" && !j.contains("attention_bias")) c.attention_bias = true;
  // Qwen3 always normalizes q and k per head.
  const bool qwen3 = model_type == "qwen3";
  c.qk_norm = bool_field(j, "qk_norm", where, qwen3);
  if (qwen3 && !c.qk_norm) {
    fail("{}: model_type 'qwen3' always has the per-head q/k norms (self_attn.q_norm, self_attn.k_norm), but qk_norm "
         "is false", where);
  }
  if (j.contains("hidden_act") && j.at("hidden_act") != "silu") {
    fail("{}: model config field 'hidden_act' is {}, but only \"silu\" (SwiGLU) is supported", where,
         j.at("hidden_act").dump());
  }
  if (j.contains("mlp_bias") && j.at("mlp_bias").is_boolean() && j.at("mlp_bias").get<bool>()) {
    fail("{}: model config field 'mlp_bias' is true, but MLP biases are not supported", where);
  }
  // As transformers: rope_scaling when it is set, else rope_parameters (transformers 5 writes
  // rope_theta there).
  const bool has_scaling = j.contains("rope_scaling") && !j.at("rope_scaling").is_null();
  if (has_scaling) parse_rope(j.at("rope_scaling"), where, "rope_scaling", c);
  const bool scaling_empty = !has_scaling || (j.at("rope_scaling").is_object() && j.at("rope_scaling").empty());
  if (scaling_empty && j.contains("rope_parameters") && !j.at("rope_parameters").is_null()) {
    parse_rope(j.at("rope_parameters"), where, "rope_parameters", c);
  }
  // Rotary embedding on a fraction of each head (Phi-style) changes the computation: the model
  // rotates every dimension, so anything but 1 is an error, never ignored.
  if (j.contains("partial_rotary_factor") && !j.at("partial_rotary_factor").is_null()) {
    const double factor = number_field<double>(j, "partial_rotary_factor", where, 1.0, true);
    if (factor != 1.0) {
      fail("{}: model config field 'partial_rotary_factor' is {}, but rotary embeddings on part of each head are "
           "not supported (only 1.0)",
           where, factor);
    }
  }
  if (qwen3 && !j.contains("head_dim")) {
    c.head_dim = 128;  // Qwen3Config's default, not hidden_size / num_attention_heads
  } else if (!explicit_head_dim || c.head_dim == 0) {
    if (c.num_attention_heads > 0 && c.hidden_size % c.num_attention_heads != 0) {
      fail("{}: hidden_size {} is not divisible by num_attention_heads {} (set head_dim explicitly "
           "or choose a divisible shape)", where, c.hidden_size, c.num_attention_heads);
    }
    c.head_dim = c.num_attention_heads > 0 ? static_cast<int>(c.hidden_size / c.num_attention_heads) : 0;
  }
  // Known fields that would change the math but are not implemented. attention_dropout: training
  // here has no dropout. A user's YAML (strict) is refused; a checkpoint's config.json is read for
  // inference and fine-tuning, so a nonzero value is warned about (the run trains without it).
  if (j.contains("attention_dropout") && !j.at("attention_dropout").is_null()) {
    const double dropout = number_field<double>(j, "attention_dropout", where, 0.0, true);
    if (dropout != 0.0) {
      if (strict) {
        fail("{}: model config field 'attention_dropout' is {}, but attention dropout is not implemented (only 0)",
             where, dropout);
      }
      spdlog::warn("{}: model config field 'attention_dropout' is {}, but attention dropout is not implemented: "
                   "training runs without it",
                   where, dropout);
    }
  }
  // sliding_window in a user's YAML was silently ignored. A checkpoint's config.json window is read
  // by io::hf_config_from_json into attention_window; Qwen3's is checked below
  // (check_qwen3_full_attention). Elsewhere in strict mode a window is refused.
  if (strict && !qwen3 && j.contains("sliding_window") && !j.at("sliding_window").is_null()) {
    fail("{}: model config field 'sliding_window' ({}) is not read here: attention spans whole sequences; for the "
         "original model's sliding window set 'attention_window' (0 = none), or leave sliding_window out or null",
         where, j.at("sliding_window").dump());
  }
  if (strict) {
    static const std::set<std::string> used = {
        "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
        "num_key_value_heads", "head_dim", "rms_norm_eps", "rope_theta", "rope_scaling",
        "tie_word_embeddings", "attention_bias", "max_position_embeddings", "initializer_range",
        "partial_rotary_factor", "rope_parameters", "qk_norm", "attention_window"};
    for (const auto& [key, value] : j.items()) {
      if (!used.contains(key) && !known_unused_fields().contains(key)) {
        fail("{}: unknown model config field '{}' (expected Hugging Face config.json fields such as "
             "hidden_size, num_attention_heads, num_key_value_heads)", where, key);
      }
    }
  }
  c.validate(where);
  if (qwen3) check_qwen3_full_attention(j, c, where);
  return c;
}

nlohmann::json LlamaConfig::to_json() const {
  nlohmann::json j = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"vocab_size", vocab_size},
      {"hidden_size", hidden_size},
      {"intermediate_size", intermediate_size},
      {"num_hidden_layers", num_hidden_layers},
      {"num_attention_heads", num_attention_heads},
      {"num_key_value_heads", num_key_value_heads},
      {"head_dim", head_dim},
      {"rms_norm_eps", rms_norm_eps},
      {"rope_theta", rope_theta},
      {"tie_word_embeddings", tie_word_embeddings},
      {"attention_bias", attention_bias},
      {"max_position_embeddings", max_position_embeddings},
      {"initializer_range", initializer_range},
      {"hidden_act", "silu"},
  };
  if (qk_norm) {
    j["architectures"] = {"Qwen3ForCausalLM"};
    j["model_type"] = "qwen3";
    j["qk_norm"] = true;
  }
  if (attention_window > 0) j["attention_window"] = attention_window;
  if (rope_scaling.type == "llama3") {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", rope_scaling.factor},
                         {"low_freq_factor", rope_scaling.low_freq_factor},
                         {"high_freq_factor", rope_scaling.high_freq_factor},
                         {"original_max_position_embeddings", rope_scaling.original_max_position_embeddings}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  return j;
}

void LlamaConfig::validate(const std::string& where) const {
  auto positive = [&](std::int64_t v, const char* name) {
    if (v <= 0) fail("{}: model config field '{}' must be positive, found {}", where, name, v);
  };
  positive(vocab_size, "vocab_size");
  positive(hidden_size, "hidden_size");
  positive(intermediate_size, "intermediate_size");
  positive(num_hidden_layers, "num_hidden_layers");
  positive(num_attention_heads, "num_attention_heads");
  positive(num_key_value_heads, "num_key_value_heads");
  positive(head_dim, "head_dim");
  if (num_attention_heads % num_key_value_heads != 0) {
    fail("{}: num_key_value_heads {} does not divide num_attention_heads {} (grouped-query attention "
         "needs an equal number of query heads per key/value head)", where, num_key_value_heads,
         num_attention_heads);
  }
  if (qk_norm && attention_bias) {
    fail("{}: qk_norm (Qwen3's q/k norms) with attention_bias true is not supported: Qwen3's attention_bias also "
         "adds an o_proj bias, which this model does not have (set attention_bias to false)", where);
  }
  if (qk_norm && attention_window > 0) {
    fail("{}: qk_norm (Qwen3's q/k norms) with attention_window {} is not supported: Qwen3 sliding windows are "
         "refused (set attention_window to 0)", where, attention_window);
  }
  if (head_dim % 2 != 0) fail("{}: head_dim {} must be even (rotary embedding pairs halves)", where, head_dim);
  if (!(rms_norm_eps > 0)) fail("{}: rms_norm_eps must be positive, found {}", where, rms_norm_eps);
  if (!(rope_theta > 0)) fail("{}: rope_theta must be positive, found {}", where, rope_theta);
  // llama3 RoPE scaling with a factor <= 0 or an empty band (low_freq_factor == high_freq_factor)
  // divides by zero or inverts the interpolation: refused where the config is read (odc-ckpt init
  // too), not first when odc-train or odc-eval builds the frequencies.
  if (rope_scaling.type == "llama3") {
    const auto& rs = rope_scaling;
    for (const auto& [name, value] : {std::pair<const char*, double>{"factor", rs.factor},
                                      {"low_freq_factor", rs.low_freq_factor},
                                      {"high_freq_factor", rs.high_freq_factor},
                                      {"original_max_position_embeddings", rs.original_max_position_embeddings}}) {
      if (!(value > 0)) fail("{}: llama3 rope_scaling field '{}' must be positive, found {}", where, name, value);
    }
    if (!(rs.high_freq_factor > rs.low_freq_factor)) {
      fail("{}: llama3 rope_scaling field 'high_freq_factor' ({}) must be greater than 'low_freq_factor' ({}): "
           "the frequencies between them are interpolated",
           where, rs.high_freq_factor, rs.low_freq_factor);
    }
  }
  if (attention_window < 0) {
    fail("{}: model config field 'attention_window' must be >= 0 (the original model's sliding window; 0 = none), "
         "found {}", where, attention_window);
  }
  if (vocab_size > (std::int64_t{1} << 31) - 1) fail("{}: vocab_size {} exceeds int32 token ids", where, vocab_size);
}

std::int64_t LlamaConfig::num_parameters() const {
  const std::int64_t c = hidden_size;
  std::int64_t per_layer = 2 * c + c * q_dim() + 2 * c * kv_dim() + q_dim() * c + 3 * c * intermediate_size;
  if (attention_bias) per_layer += q_dim() + 2 * kv_dim();
  if (qk_norm) per_layer += 2 * head_dim;
  std::int64_t total = vocab_size * c + num_hidden_layers * per_layer + c;
  if (!tie_word_embeddings) total += vocab_size * c;
  return total;
}

double LlamaConfig::linear_flops_per_token() const {
  const double c = static_cast<double>(hidden_size);
  const double per_layer = c * static_cast<double>(q_dim()) * 2 + 2 * c * static_cast<double>(kv_dim()) +
                           3 * c * static_cast<double>(intermediate_size);
  const double head = c * static_cast<double>(vocab_size);
  return 6.0 * (num_hidden_layers * per_layer + head);
}

double LlamaConfig::attention_flops_per_pair() const {
  return 12.0 * static_cast<double>(q_dim()) * static_cast<double>(num_hidden_layers);
}

}  // namespace odc::model
