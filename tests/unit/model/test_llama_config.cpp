// LlamaConfig: Hugging Face field parsing and shape validation with clear errors.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "odc/core/error.h"
#include "odc/model/llama_config.h"
#include "odc/model/units.h"

using odc::model::LlamaConfig;
using Catch::Contains;

namespace {
nlohmann::json base() {
  return {{"vocab_size", 100}, {"hidden_size", 64}, {"intermediate_size", 128},
          {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2}};
}
}  // namespace

TEST_CASE("config.json fields parse with Hugging Face defaults", "[model]") {
  auto c = LlamaConfig::from_json(base(), "cfg", true);
  CHECK(c.head_dim == 16);
  CHECK(c.kv_group() == 2);
  auto j = base();
  j.erase("num_key_value_heads");
  CHECK(LlamaConfig::from_json(j, "cfg", true).num_key_value_heads == 4);
  j = base();
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  CHECK(LlamaConfig::from_json(j, "cfg", true).rope_scaling.type == "llama3");
  // Round trip through to_json.
  const auto again = LlamaConfig::from_json(LlamaConfig::from_json(j, "cfg", true).to_json(), "cfg", true);
  CHECK(again.rope_scaling.factor == 8.0);
  CHECK(again.num_parameters() == LlamaConfig::from_json(j, "cfg", true).num_parameters());
}

TEST_CASE("invalid model shapes are clear errors naming the field", "[model]") {
  auto j = base();
  j["hidden_size"] = 66;
  CHECK_THROWS_WITH(LlamaConfig::from_json(j, "model.config", true),
                    Contains("model.config") && Contains("hidden_size 66 is not divisible by num_attention_heads 4"));
  j = base();
  j["num_key_value_heads"] = 3;
  CHECK_THROWS_WITH(LlamaConfig::from_json(j, "model.config", true),
                    Contains("num_key_value_heads 3 does not divide num_attention_heads 4"));
  j = base();
  j["hiden_size"] = 64;
  CHECK_THROWS_WITH(LlamaConfig::from_json(j, "model.config", true), Contains("unknown model config field 'hiden_size'"));
  CHECK_NOTHROW(LlamaConfig::from_json(j, "config.json", false));  // checkpoints carry extra fields
  j = base();
  j.erase("vocab_size");
  CHECK_THROWS_WITH(LlamaConfig::from_json(j, "model.config", true), Contains("'vocab_size' is required"));
  j = base();
  j["num_hidden_layers"] = 1.5;
  CHECK_THROWS_WITH(LlamaConfig::from_json(j, "model.config", true), Contains("'num_hidden_layers' must be an integer"));
  // Values beyond the field's 32-bit type are errors, never wrapped into another shape
  // (4294967297 = 2^32 + 1 once trained a 1-layer model).
  for (const char* field : {"num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim"}) {
    j = base();
    j[field] = 4294967297LL;
    CHECK_THROWS_WITH(LlamaConfig::from_json(j, "model.config", true),
                      Contains(std::string("'") + field + "' is 4294967297, outside the range"));
    j[field] = -4294967295LL;
    CHECK_THROWS_WITH(LlamaConfig::from_json(j, "model.config", true), Contains("outside the range"));
  }
  j = base();
  j["vocab_size"] = 18446744073709551615ULL;  // beyond int64: must not wrap to -1
  CHECK_THROWS_WITH(LlamaConfig::from_json(j, "model.config", true),
                    Contains("'vocab_size' is 18446744073709551615, outside the range"));
  // Fields that change the computation are errors even in a checkpoint's config.json (strict =
  // false), where other unknown fields pass: they were silently ignored.
  for (const bool strict : {true, false}) {
    j = base();
    j["partial_rotary_factor"] = 0.5;
    CHECK_THROWS_WITH(LlamaConfig::from_json(j, "config.json", strict),
                      Contains("'partial_rotary_factor' is 0.5") && Contains("not supported"));
    j["partial_rotary_factor"] = 1.0;
    CHECK_NOTHROW(LlamaConfig::from_json(j, "config.json", strict));
    j = base();
    j["rope_scaling"] = {{"factor", 8.0}};
    CHECK_THROWS_WITH(LlamaConfig::from_json(j, "config.json", strict),
                      Contains("rope_scaling {\"factor\":8.0} has no 'rope_type' (or 'type')"));
    j["rope_scaling"] = nlohmann::json::object();
    CHECK(LlamaConfig::from_json(j, "config.json", strict).rope_scaling.type == "default");
  }
  j = base();
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  CHECK_THROWS_WITH(LlamaConfig::from_json(j, "model.config", true), Contains("rope_scaling type 'yarn' is not supported"));
}

// Found by tests/fuzz/fuzz_config_yaml: a non-string rope_scaling type (model.config: {rope_scaling:
// {type: [1]}}) escaped as nlohmann's type_error instead of an odc::Error naming the field.
TEST_CASE("rope_scaling type fields must be strings", "[model]") {
  auto j = base();
  j["rope_scaling"] = {{"type", nlohmann::json::array({1})}, {"factor", 4.0}};
  CHECK_THROWS_AS(LlamaConfig::from_json(j, "model.config", true), odc::Error);
  CHECK_THROWS_WITH(LlamaConfig::from_json(j, "model.config", true),
                    Contains("model.config") && Contains("rope_scaling field 'type' must be a string, found array"));
  j["rope_scaling"] = {{"rope_type", nullptr}};
  CHECK_THROWS_WITH(LlamaConfig::from_json(j, "model.config", true), Contains("'rope_type' must be a string"));
  // rope_type wins over type, as in Hugging Face.
  j["rope_scaling"] = {{"type", "default"}, {"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  CHECK(LlamaConfig::from_json(j, "model.config", true).rope_scaling.type == "llama3");
}

TEST_CASE("unit layouts use Hugging Face tensor names and count every parameter", "[model]") {
  auto j = base();
  j["attention_bias"] = true;
  const auto c = LlamaConfig::from_json(j, "cfg", true);
  const auto units = odc::model::build_unit_layouts(c);
  REQUIRE(units.size() == 4);
  std::int64_t total = 0;
  for (const auto& u : units) total += u.numel;
  CHECK(total == c.num_parameters());
  CHECK(units[1].find("model.layers.0.self_attn.q_proj.bias").shape == odc::Shape{64});
  CHECK_FALSE(units[1].find("model.layers.0.input_layernorm.weight").weight_decay);
  CHECK(units[3].find("lm_head.weight").shape == odc::Shape{100, 64});
}

TEST_CASE("initialization depends only on seed and element, not on the range asked for", "[model]") {
  const auto c = LlamaConfig::from_json(base(), "cfg", true);
  const auto units = odc::model::build_unit_layouts(c);
  const auto& layer = units[1];
  std::vector<float> whole(static_cast<std::size_t>(layer.numel + 5));
  odc::model::init_unit_range(layer, c, 42, 0, layer.numel + 5, whole.data());
  std::vector<float> part(100);
  odc::model::init_unit_range(layer, c, 42, 1000, 1100, part.data());
  for (int i = 0; i < 100; ++i) CHECK(part[static_cast<std::size_t>(i)] == whole[static_cast<std::size_t>(1000 + i)]);
  CHECK(whole[static_cast<std::size_t>(layer.numel + 2)] == 0.0f);  // padding
  // Norm weights start at one, matrices ~ N(0, 0.02).
  CHECK(whole[0] == 1.0f);
  const auto& q = layer.find("model.layers.0.self_attn.q_proj.weight");
  double sum2 = 0;
  for (std::int64_t i = 0; i < q.numel; ++i) sum2 += whole[static_cast<std::size_t>(q.offset + i)] * whole[static_cast<std::size_t>(q.offset + i)];
  CHECK(std::sqrt(sum2 / static_cast<double>(q.numel)) == Approx(0.02).epsilon(0.05));
  std::vector<float> other(100);
  odc::model::init_unit_range(layer, c, 43, 1000, 1100, other.data());
  CHECK(other != part);
}

namespace {
// Qwen3-0.6B's config.json as published (transformers 4.51): q/k norms implied by model_type,
// head_dim 128 where hidden_size / heads is 64, tied embeddings, the sliding window off.
nlohmann::json qwen3_0_6b() {
  return nlohmann::json::parse(R"({
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
    "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
    "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
    "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
    "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null, "tie_word_embeddings": true,
    "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": true,
    "use_sliding_window": false, "vocab_size": 151936})");
}
}  // namespace

TEST_CASE("Qwen3 config.json: q/k norms, explicit head_dim, parameters as published", "[model][qwen3]") {
  for (const bool strict : {false, true}) {
    const auto c = LlamaConfig::from_json(qwen3_0_6b(), "config.json", strict);
    CHECK(c.qk_norm);
    CHECK_FALSE(c.attention_bias);
    CHECK(c.tie_word_embeddings);
    CHECK(c.head_dim == 128);
    CHECK(c.q_dim() == 2048);  // not hidden_size
    CHECK(c.kv_dim() == 1024);
    CHECK(c.rope_theta == 1e6);
    // Qwen3-0.6B: 0.6B parameters, 0.44B without the (tied) embedding.
    CHECK(c.num_parameters() == 596'049'920);
    CHECK(c.num_parameters() - c.vocab_size * c.hidden_size == 440'467'456);
  }
  const auto c = LlamaConfig::from_json(qwen3_0_6b(), "config.json", false);
  // The norms are element-wise: not in the matmul FLOPs (q is 2048 wide, o_proj 2048 -> 1024).
  const double per_layer = 1024.0 * 2048 * 2 + 2 * 1024.0 * 1024 + 3 * 1024.0 * 3072;
  CHECK(c.linear_flops_per_token() == Approx(6.0 * (28 * per_layer + 1024.0 * 151936)));
  CHECK(c.attention_flops_per_pair() == Approx(12.0 * 2048 * 28));

  // Round trip through to_json (the native manifests): still Qwen3; qk_norm is only written when
  // set, so every other model's JSON (and the manifests that compare it) is unchanged.
  const auto j = c.to_json();
  CHECK(j.at("model_type") == "qwen3");
  CHECK(j.at("qk_norm") == true);
  const auto again = LlamaConfig::from_json(j, "manifest", true);
  CHECK(again.qk_norm);
  CHECK(again.head_dim == 128);
  CHECK(again.num_parameters() == c.num_parameters());
  CHECK_FALSE(LlamaConfig::from_json(base(), "cfg", true).to_json().contains("qk_norm"));

  // qk_norm alone (a YAML model.config) gives the same layout as model_type qwen3.
  auto yaml = base();
  yaml["qk_norm"] = true;
  const auto units = odc::model::build_unit_layouts(LlamaConfig::from_json(yaml, "model.config", true));
  const auto& q_norm = units[1].find("model.layers.0.self_attn.q_norm.weight");
  CHECK(q_norm.shape == odc::Shape{16});
  CHECK(q_norm.init == odc::model::InitKind::ones);
  CHECK_FALSE(q_norm.weight_decay);
  CHECK(units[2].find("model.layers.1.self_attn.k_norm.weight").shape == odc::Shape{16});
  std::int64_t total = 0;
  for (const auto& u : units) total += u.numel;
  CHECK(total == LlamaConfig::from_json(yaml, "model.config", true).num_parameters());
}

TEST_CASE("Qwen3 config.json: HF defaults and contradictions", "[model][qwen3]") {
  auto j = qwen3_0_6b();
  j.erase("head_dim");  // Qwen3Config's default is 128, not hidden_size / heads (64)
  CHECK(LlamaConfig::from_json(j, "config.json", false).head_dim == 128);
  j = qwen3_0_6b();
  j["attention_bias"] = true;  // HF's Qwen3 then has an o_proj bias too
  CHECK_THROWS_WITH(LlamaConfig::from_json(j, "config.json", false),
                    Contains("config.json") && Contains("attention_bias true is not supported") &&
                        Contains("o_proj bias"));
  j = qwen3_0_6b();
  j["qk_norm"] = false;
  CHECK_THROWS_WITH(LlamaConfig::from_json(j, "config.json", false),
                    Contains("config.json") && Contains("'qwen3' always has the per-head q/k norms"));
  // transformers 5 writes rope_theta into rope_parameters.
  j = qwen3_0_6b();
  j.erase("rope_theta");
  j.erase("rope_scaling");
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
  CHECK(LlamaConfig::from_json(j, "config.json", true).rope_theta == 1e6);
  j["rope_parameters"] = {{"rope_theta", 5e5}};
  CHECK(LlamaConfig::from_json(j, "config.json", true).rope_theta == 5e5);
  j["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"rope_theta", 1e6}};
  CHECK_THROWS_WITH(LlamaConfig::from_json(j, "config.json", false), Contains("rope_parameters type 'yarn'"));
  j["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 1e6}}}};
  CHECK_THROWS_WITH(LlamaConfig::from_json(j, "config.json", false), Contains("per layer type ('full_attention')"));
  // A set rope_scaling wins over rope_parameters, as in transformers.
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  CHECK(LlamaConfig::from_json(j, "config.json", false).rope_scaling.type == "llama3");
}

TEST_CASE("Qwen3 sliding windows: accepted only where every layer attends fully", "[model][qwen3]") {
  auto parse = [](const nlohmann::json& j) { return LlamaConfig::from_json(j, "config.json", false); };
  auto j = qwen3_0_6b();
  // Windows that change nothing: off, null, past every layer, or as long as the context.
  j["use_sliding_window"] = false;
  j["sliding_window"] = 4096;
  CHECK_NOTHROW(parse(j));
  j["use_sliding_window"] = true;
  j["sliding_window"] = nullptr;
  CHECK_NOTHROW(parse(j));
  j["sliding_window"] = 4096;
  j["max_window_layers"] = 28;  // layers >= 28 would slide: there are 28
  CHECK_NOTHROW(parse(j));
  j["max_window_layers"] = 20;
  j["sliding_window"] = 40960;  // = max_position_embeddings
  CHECK_NOTHROW(parse(j));
  j["layer_types"] = std::vector<std::string>(28, "full_attention");
  j["sliding_window"] = 4096;
  CHECK_NOTHROW(parse(j));

  // Windows that would change the math are refused, naming the field and a layer.
  j = qwen3_0_6b();
  j["use_sliding_window"] = true;
  j["sliding_window"] = 4096;
  j["max_window_layers"] = 20;
  CHECK_THROWS_WITH(parse(j), Contains("config.json") &&
                                  Contains("use_sliding_window is true with sliding_window 4096") &&
                                  Contains("layer 20") && Contains("not implemented"));
  j.erase("sliding_window");  // Qwen3Config's default window: 4096
  CHECK_THROWS_WITH(parse(j), Contains("sliding_window 4096"));
  j.erase("max_window_layers");  // default 28 of 28 layers: none slides
  CHECK_NOTHROW(parse(j));
  std::vector<std::string> types(28, "full_attention");
  types[3] = "sliding_attention";
  j["layer_types"] = types;
  CHECK_THROWS_WITH(parse(j), Contains("layer 3"));
  j["use_sliding_window"] = false;  // a sliding layer without a window: transformers refuses it too
  CHECK_THROWS_WITH(parse(j), Contains("layer 3") && Contains("no window"));
  j["layer_types"] = std::vector<std::string>(27, "full_attention");
  CHECK_THROWS_WITH(parse(j), Contains("layer_types must list") && Contains("28 layers"));
  j["layer_types"] = std::vector<std::string>(28, "chunked_attention");
  CHECK_THROWS_WITH(parse(j), Contains("layer_types[0] is \"chunked_attention\""));
  // In a user's YAML (strict) as well.
  j = qwen3_0_6b();
  j["use_sliding_window"] = true;
  j["sliding_window"] = 128;
  j["max_window_layers"] = 0;
  CHECK_THROWS_WITH(LlamaConfig::from_json(j, "model.config", true),
                    Contains("model.config") && Contains("sliding_window 128") && Contains("layer 0"));
}

// attention_window: the original model's sliding window (io::hf_config_from_json sets it from
// Mistral's and Qwen2's fields). It survives the model config's own round trip (native manifests
// and model.config store to_json), is written only when set, and is validated.
TEST_CASE("attention_window: round trip, absent when 0, validated", "[model]") {
  const auto none = LlamaConfig::from_json(base(), "model.config", true);
  CHECK(none.attention_window == 0);
  CHECK_FALSE(none.to_json().contains("attention_window"));  // existing manifests compare equal
  auto j = base();
  j["attention_window"] = 16;
  const auto windowed = LlamaConfig::from_json(j, "model.config", true);  // strict YAML accepts it
  CHECK(windowed.attention_window == 16);
  CHECK(windowed.to_json().at("attention_window") == 16);
  for (const bool strict : {true, false}) {
    const auto again = LlamaConfig::from_json(windowed.to_json(), "manifest.json", strict);
    CHECK(again.attention_window == 16);
    CHECK(again.to_json() == windowed.to_json());
  }
  j["attention_window"] = 0;
  CHECK(LlamaConfig::from_json(j, "model.config", true).to_json() == none.to_json());
  j["attention_window"] = -1;
  CHECK_THROWS_WITH(LlamaConfig::from_json(j, "model.config", true),
                    Contains("model.config") && Contains("'attention_window' must be >= 0") && Contains("found -1"));
  j["attention_window"] = "16";
  CHECK_THROWS_WITH(LlamaConfig::from_json(j, "model.config", true), Contains("'attention_window' must be an integer"));
  j["attention_window"] = 16;
  j["qk_norm"] = true;
  CHECK_THROWS_WITH(LlamaConfig::from_json(j, "model.config", true),
                    Contains("qk_norm") && Contains("attention_window 16 is not supported"));
}

// A llama3 rope_scaling with factor 0 (or below) or an empty band (low_freq_factor ==
// high_freq_factor) was accepted by odc-ckpt init and only refused later by odc-train and
// odc-eval: refused where the config is read, strict or not, naming the field.
TEST_CASE("llama3 rope_scaling: non-positive factors and an empty band are refused naming the field", "[model]") {
  auto with = [](const char* key, double value) {
    auto j = base();
    j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
    j["rope_scaling"][key] = value;
    return j;
  };
  for (const bool strict : {true, false}) {
    CHECK_NOTHROW(LlamaConfig::from_json(with("factor", 8.0), "model.config", strict));
    CHECK_THROWS_WITH(LlamaConfig::from_json(with("factor", 0.0), "model.config", strict),
                      Contains("model.config") && Contains("llama3 rope_scaling field 'factor' must be positive") &&
                          Contains("found 0"));
    CHECK_THROWS_WITH(LlamaConfig::from_json(with("factor", -2.0), "model.config", strict),
                      Contains("'factor' must be positive") && Contains("found -2"));
    CHECK_THROWS_WITH(LlamaConfig::from_json(with("low_freq_factor", 0.0), "model.config", strict),
                      Contains("'low_freq_factor' must be positive"));
    CHECK_THROWS_WITH(LlamaConfig::from_json(with("original_max_position_embeddings", -1.0), "model.config", strict),
                      Contains("'original_max_position_embeddings' must be positive"));
    CHECK_THROWS_WITH(LlamaConfig::from_json(with("high_freq_factor", 1.0), "model.config", strict),
                      Contains("'high_freq_factor' (1) must be greater than 'low_freq_factor' (1)"));
    CHECK_THROWS_WITH(LlamaConfig::from_json(with("high_freq_factor", 0.5), "model.config", strict),
                      Contains("'high_freq_factor' (0.5) must be greater than 'low_freq_factor' (1)"));
  }
}

// `--set model.config.sliding_window=...` and a nonzero attention_dropout in a YAML model.config
// were silently ignored. The user's YAML (strict) refuses them, pointing to attention_window for a
// window; a checkpoint's config.json (not strict) keeps loading (its window is read by
// io::hf_config_from_json, a nonzero dropout is warned about).
TEST_CASE("model.config: sliding_window and a nonzero attention_dropout are refused, not ignored", "[model]") {
  auto j = base();
  j["attention_dropout"] = 0.0;
  j["sliding_window"] = nullptr;
  j["pretraining_tp"] = 1;
  CHECK_NOTHROW(LlamaConfig::from_json(j, "model.config", true));  // harmless fields are accepted
  j["attention_dropout"] = 0.1;
  CHECK_THROWS_WITH(LlamaConfig::from_json(j, "model.config", true),
                    Contains("model.config") && Contains("'attention_dropout' is 0.1") &&
                        Contains("attention dropout is not implemented (only 0)"));
  CHECK(LlamaConfig::from_json(j, "config.json", false).hidden_size == 64);  // warned, still loads
  j["attention_dropout"] = "x";
  CHECK_THROWS_WITH(LlamaConfig::from_json(j, "model.config", true), Contains("'attention_dropout' must be a number"));
  j = base();
  j["sliding_window"] = 4096;
  CHECK_THROWS_WITH(LlamaConfig::from_json(j, "model.config", true),
                    Contains("model.config") && Contains("'sliding_window' (4096) is not read here") &&
                        Contains("set 'attention_window'"));
  CHECK_NOTHROW(LlamaConfig::from_json(j, "config.json", false));
  j.erase("sliding_window");
  j["attention_window"] = 4096;
  CHECK(LlamaConfig::from_json(j, "model.config", true).attention_window == 4096);
}
