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
