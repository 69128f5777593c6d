// Sliding windows of Mistral and Qwen2 checkpoints through the Hugging Face adapter: the window
// that reaches a layer (as transformers reads the fields) becomes LlamaConfig::attention_window,
// one that changes nothing leaves it 0, bad window fields are errors naming them, and an export
// writes the window back in the architecture's fields (Qwen2: every layer slides) so that the
// exported model behaves as the original one; a model without a window exports as before.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "odc/core/dtype.h"
#include "odc/core/error.h"
#include "odc/io/hf_checkpoint.h"
#include "odc/model/llama_config.h"
#include "odc/model/units.h"
#include "unit/temp_dir.h"

namespace {

namespace fs = std::filesystem;
using odc::io::hf_config_from_json;
using odc::io::HfCheckpoint;
using odc::model::LlamaConfig;
using Catch::Contains;

fs::path temp_dir() {
  static const odc::test::TempDir dir("hf_sliding_window");
  return dir.path();
}

nlohmann::json hf_json(const std::string& architecture) {
  return {{"architectures", {architecture}}, {"vocab_size", 37}, {"hidden_size", 16}, {"intermediate_size", 24},
          {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
          {"max_position_embeddings", 64}};
}

std::int64_t window_of(const nlohmann::json& j) { return hf_config_from_json(j, "config.json").attention_window; }

std::string error_of(const nlohmann::json& j) {
  try {
    (void)hf_config_from_json(j, "dir/config.json");
  } catch (const odc::Error& e) {
    return e.what();
  }
  return "";
}

void export_model(const fs::path& dir, const LlamaConfig& config, const std::string& architecture) {
  const auto units = odc::model::build_unit_layouts(config);
  odc::io::write_hf_checkpoint(dir.string(), config, architecture, odc::DType::f32, [&](int unit, float* out) {
    const auto& layout = units[static_cast<std::size_t>(unit)];
    odc::model::init_unit_range(layout, config, 3, 0, layout.numel, out);
  });
}

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

}  // namespace

TEST_CASE("HF sliding window: Mistral's sliding_window becomes attention_window when shorter than the context",
          "[io]") {
  auto j = hf_json("MistralForCausalLM");
  j["sliding_window"] = 16;
  CHECK(window_of(j) == 16);
  j["sliding_window"] = nullptr;  // no window
  CHECK(window_of(j) == 0);
  j["sliding_window"] = 64;  // = max_position_embeddings: every sequence the model is meant for fits
  CHECK(window_of(j) == 0);
  j.erase("sliding_window");  // MistralConfig's default: 4096
  CHECK(window_of(j) == 0);
  j["max_position_embeddings"] = 8192;
  CHECK(window_of(j) == 4096);
  for (const nlohmann::json& bad : {nlohmann::json(0), nlohmann::json(-8), nlohmann::json("16"), nlohmann::json(1.5)}) {
    j["sliding_window"] = bad;
    CHECK_THAT(error_of(j), Contains("dir/config.json: sliding_window must be a positive number of tokens or null") &&
                                Contains(bad.dump()));
  }
  // Llama has no window: its sliding_window fields (some exports carry them) change nothing.
  auto llama = hf_json("LlamaForCausalLM");
  llama["sliding_window"] = 16;
  CHECK(window_of(llama) == 0);
}

TEST_CASE("HF sliding window: Qwen2's window counts only when use_sliding_window puts a layer on it", "[io]") {
  auto j = hf_json("Qwen2ForCausalLM");
  j["sliding_window"] = 16;
  CHECK(window_of(j) == 0);  // use_sliding_window absent: false
  j["use_sliding_window"] = false;
  CHECK(window_of(j) == 0);
  j["use_sliding_window"] = true;
  CHECK(window_of(j) == 0);  // max_window_layers default 28: layers >= 28 slide, there are 2
  j["max_window_layers"] = 2;
  CHECK(window_of(j) == 0);
  j["max_window_layers"] = 1;  // layer 1 slides
  CHECK(window_of(j) == 16);
  j["max_window_layers"] = 0;
  CHECK(window_of(j) == 16);
  // layer_types, when given, says which layers slide (transformers ignores max_window_layers then).
  j["layer_types"] = {"full_attention", "full_attention"};
  CHECK(window_of(j) == 0);
  j["layer_types"] = {"full_attention", "sliding_attention"};
  j["max_window_layers"] = 28;
  CHECK(window_of(j) == 16);
  j.erase("layer_types");
  j["max_window_layers"] = 0;
  j["sliding_window"] = nullptr;
  CHECK(window_of(j) == 0);
  j.erase("sliding_window");  // Qwen2Config's default: 4096, longer than this context of 64
  CHECK(window_of(j) == 0);
  j["max_position_embeddings"] = 32768;
  CHECK(window_of(j) == 4096);
  j["use_sliding_window"] = "yes";
  CHECK_THAT(error_of(j), Contains("use_sliding_window must be true or false, found \"yes\""));
  j["use_sliding_window"] = true;
  j["max_window_layers"] = "all";
  CHECK_THAT(error_of(j), Contains("max_window_layers must be an integer, found \"all\""));
}

TEST_CASE("HF sliding window: attention_window in config.json must agree with the HF fields", "[io]") {
  auto j = hf_json("MistralForCausalLM");
  j["sliding_window"] = 16;
  j["attention_window"] = 16;
  CHECK(window_of(j) == 16);
  j["attention_window"] = 8;
  CHECK_THAT(error_of(j), Contains("dir/config.json: attention_window 8 is not a Hugging Face config.json field") &&
                              Contains("sliding_window 16"));
  // e.g. odc-ckpt init --set model.config.attention_window=16 of a Llama: never silently dropped.
  auto llama = hf_json("LlamaForCausalLM");
  llama["attention_window"] = 16;
  CHECK_THAT(error_of(llama), Contains("attention_window 16") && Contains("window is none"));
}

TEST_CASE("HF export: a model with a window exports it (Mistral, Qwen2 on every layer), one without as before",
          "[io]") {
  auto mistral = hf_json("MistralForCausalLM");
  mistral["sliding_window"] = 16;
  const LlamaConfig config = hf_config_from_json(mistral, "config.json");
  REQUIRE(config.attention_window == 16);
  CHECK(odc::io::default_hf_architecture(config) == "MistralForCausalLM");

  const fs::path dir = temp_dir() / "mistral";
  export_model(dir, config, "MistralForCausalLM");
  const auto written = read_json(dir / "config.json");
  CHECK(written.at("sliding_window") == 16);
  CHECK_FALSE(written.contains("attention_window"));  // ours, not transformers'
  const HfCheckpoint back(dir.string());
  CHECK(back.config().attention_window == 16);
  CHECK(back.config().to_json() == config.to_json());

  // Qwen2: use_sliding_window with max_window_layers 0 puts every layer on the window in
  // transformers (layer i slides when i >= max_window_layers).
  auto biased = config;
  biased.attention_bias = true;
  CHECK(odc::io::default_hf_architecture(biased) == "Qwen2ForCausalLM");
  const fs::path qwen2 = temp_dir() / "qwen2";
  export_model(qwen2, biased, "Qwen2ForCausalLM");
  const auto q = read_json(qwen2 / "config.json");
  CHECK(q.at("use_sliding_window") == true);
  CHECK(q.at("sliding_window") == 16);
  CHECK(q.at("max_window_layers") == 0);
  CHECK_FALSE(q.contains("attention_window"));
  CHECK(HfCheckpoint(qwen2.string()).config().attention_window == 16);

  // Without a window: what it was (sliding_window null, use_sliding_window false).
  auto plain = config;
  plain.attention_window = 0;
  CHECK(odc::io::default_hf_architecture(plain) == "LlamaForCausalLM");
  export_model(temp_dir() / "mistral_full", plain, "MistralForCausalLM");
  CHECK(read_json(temp_dir() / "mistral_full" / "config.json").at("sliding_window").is_null());
  auto plain_biased = biased;
  plain_biased.attention_window = 0;
  export_model(temp_dir() / "qwen2_full", plain_biased, "Qwen2ForCausalLM");
  const auto q_full = read_json(temp_dir() / "qwen2_full" / "config.json");
  CHECK(q_full.at("use_sliding_window") == false);
  CHECK_FALSE(q_full.contains("max_window_layers"));

  // Llama cannot express a window: refused before anything is written, naming what to use.
  CHECK_THROWS_WITH(export_model(temp_dir() / "llama", config, "LlamaForCausalLM"),
                    Contains("sliding window of 16 tokens") && Contains("LlamaForCausalLM cannot express") &&
                        Contains("export it as MistralForCausalLM"));
  CHECK_FALSE(fs::exists(temp_dir() / "llama"));
}
