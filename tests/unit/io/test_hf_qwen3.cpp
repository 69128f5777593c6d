// Qwen3ForCausalLM through the Hugging Face adapter: its per-head q/k norm weights load and export
// by their HF names, config.json comes back as transformers reads a Qwen3 model (model_type qwen3,
// explicit head_dim, no sliding window, no field of ours), the architecture's rules are enforced
// both ways, and a checkpoint whose config makes layers attend within a window is refused.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "odc/core/dtype.h"
#include "odc/core/error.h"
#include "odc/io/hf_checkpoint.h"
#include "odc/io/safetensors.h"
#include "odc/model/llama_config.h"
#include "odc/model/units.h"
#include "unit/temp_dir.h"

namespace {

namespace fs = std::filesystem;
using odc::io::HfCheckpoint;
using odc::model::LlamaConfig;
using Catch::Contains;

fs::path temp_dir() {
  static const odc::test::TempDir dir("hf_qwen3");
  return dir.path();
}

// A Qwen3 config.json as published, shrunk: head_dim 12 where hidden_size / heads is 4.
nlohmann::json qwen3_json() {
  return {{"architectures", {"Qwen3ForCausalLM"}}, {"model_type", "qwen3"}, {"vocab_size", 37},
          {"hidden_size", 16}, {"intermediate_size", 24}, {"num_hidden_layers", 2}, {"num_attention_heads", 4},
          {"num_key_value_heads", 2}, {"head_dim", 12}, {"rms_norm_eps", 1e-6}, {"rope_theta", 1000000.0},
          {"rope_scaling", nullptr}, {"tie_word_embeddings", true}, {"attention_bias", false},
          {"max_position_embeddings", 64}, {"use_sliding_window", false}, {"sliding_window", nullptr},
          {"max_window_layers", 2}, {"hidden_act", "silu"}, {"bos_token_id", 1}, {"eos_token_id", 2}};
}

// Initialized values with the constant tensors (norms) made non-constant, so that a mix-up of
// q_norm and k_norm (same shape) is visible.
void fill_unit(const LlamaConfig& config, int unit, float* out) {
  const auto units = odc::model::build_unit_layouts(config);
  const auto& layout = units[static_cast<std::size_t>(unit)];
  odc::model::init_unit_range(layout, config, 9, 0, layout.numel, out);
  for (const auto& t : layout.tensors) {
    if (t.init == odc::model::InitKind::normal) continue;
    const float shift = t.name.ends_with("k_norm.weight") ? 0.5f : 0.0f;
    for (std::int64_t i = 0; i < t.numel; ++i) out[t.offset + i] += shift + 0.01f * static_cast<float>(i % 7);
  }
}

void export_model(const fs::path& dir, const LlamaConfig& config, const std::string& architecture,
                  odc::DType dtype = odc::DType::f32) {
  odc::io::write_hf_checkpoint(dir.string(), config, architecture, dtype,
                               [&](int unit, float* out) { fill_unit(config, unit, out); });
}

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

void write_json(const fs::path& path, const nlohmann::json& j) { std::ofstream(path) << j.dump(2); }

std::string error_of(const fs::path& dir) {
  try {
    const HfCheckpoint ckpt(dir.string());
  } catch (const odc::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("HF Qwen3: export then load gives the units back, config.json is Qwen3's", "[io][qwen3]") {
  const LlamaConfig config = odc::io::hf_config_from_json(qwen3_json(), "config.json");
  REQUIRE(config.qk_norm);
  CHECK(odc::io::default_hf_architecture(config) == "Qwen3ForCausalLM");
  const fs::path dir = temp_dir() / "qwen3";
  export_model(dir, config, "Qwen3ForCausalLM");

  const auto cfg = read_json(dir / "config.json");
  CHECK(cfg.at("architectures") == nlohmann::json::array({"Qwen3ForCausalLM"}));
  CHECK(cfg.at("model_type") == "qwen3");
  CHECK(cfg.at("head_dim") == 12);
  CHECK(cfg.at("num_attention_heads") == 4);
  CHECK(cfg.at("hidden_size") == 16);
  CHECK(cfg.at("attention_bias") == false);
  CHECK(cfg.at("tie_word_embeddings") == true);
  CHECK(cfg.at("rms_norm_eps") == 1e-6);
  CHECK(cfg.at("rope_theta") == 1e6);
  CHECK(cfg.at("use_sliding_window") == false);
  CHECK(cfg.at("sliding_window").is_null());
  CHECK_FALSE(cfg.contains("qk_norm"));  // ours, not a Qwen3Config field

  const HfCheckpoint ckpt(dir.string());
  CHECK(ckpt.architecture() == "Qwen3ForCausalLM");
  CHECK(ckpt.config().to_json() == config.to_json());
  CHECK_FALSE(ckpt.tensors().contains("lm_head.weight"));  // tied
  CHECK(ckpt.tensors().info("model.layers.1.self_attn.q_norm.weight").shape == odc::Shape{12});
  CHECK(ckpt.tensors().info("model.layers.0.self_attn.k_norm.weight").shape == odc::Shape{12});
  CHECK(ckpt.tensors().info("model.layers.0.self_attn.q_proj.weight").shape == odc::Shape{48, 16});
  CHECK(ckpt.tensors().info("model.layers.0.self_attn.o_proj.weight").shape == odc::Shape{16, 48});
  for (int u = 0; u < static_cast<int>(ckpt.units().size()); ++u) {
    std::vector<float> expected(static_cast<std::size_t>(ckpt.units()[static_cast<std::size_t>(u)].numel));
    fill_unit(config, u, expected.data());
    std::vector<float> got(expected.size());
    ckpt.read_unit_range(u, 0, static_cast<std::int64_t>(got.size()), got.data());
    CHECK(got == expected);
  }
  // The k norm read from its own tensor, not the q norm's.
  const auto& k_norm = ckpt.units()[1].find("model.layers.0.self_attn.k_norm.weight");
  std::vector<float> k(static_cast<std::size_t>(k_norm.numel));
  ckpt.read_unit_range(1, k_norm.offset, k_norm.numel, k.data());
  CHECK(k[0] == Approx(1.5f));

  // Without "model_type", the architecture alone makes it Qwen3 (q/k norms, head_dim 128 default).
  auto j = qwen3_json();
  j.erase("model_type");
  j.erase("head_dim");
  const auto by_name = odc::io::hf_config_from_json(j, "config.json");
  CHECK(by_name.qk_norm);
  CHECK(by_name.head_dim == 128);
}

TEST_CASE("HF Qwen3: a checkpoint without its q/k norm tensors or with stray ones is refused", "[io][qwen3]") {
  const LlamaConfig config = odc::io::hf_config_from_json(qwen3_json(), "config.json");
  const fs::path dir = temp_dir() / "qwen3_as_llama";
  export_model(dir, config, "Qwen3ForCausalLM");
  // The same tensors under a Llama config: the norms are unexpected there.
  auto j = read_json(dir / "config.json");
  j["architectures"] = {"LlamaForCausalLM"};
  j["model_type"] = "llama";
  write_json(dir / "config.json", j);
  CHECK_THAT(error_of(dir), Contains("unexpected tensor 'model.layers.0.self_attn.q_norm.weight'") &&
                                Contains("LlamaForCausalLM"));
  // A Llama checkpoint relabelled Qwen3: the norms are missing.
  LlamaConfig plain = config;
  plain.qk_norm = false;
  const fs::path llama = temp_dir() / "llama_as_qwen3";
  export_model(llama, plain, "LlamaForCausalLM");
  j = read_json(llama / "config.json");
  j["architectures"] = {"Qwen3ForCausalLM"};
  j["model_type"] = "qwen3";
  write_json(llama / "config.json", j);
  CHECK_THAT(error_of(llama), Contains("missing tensor 'model.layers.1.self_attn.k_norm.weight' (shape [12]"));
}

TEST_CASE("HF Qwen3: configs the architecture or the model cannot express are clear errors", "[io][qwen3]") {
  const LlamaConfig config = odc::io::hf_config_from_json(qwen3_json(), "config.json");
  LlamaConfig plain = config;
  plain.qk_norm = false;
  const fs::path dir = temp_dir() / "bad_qwen3_export";
  CHECK_THROWS_WITH(export_model(dir, config, "LlamaForCausalLM"),
                    Contains("LlamaForCausalLM has no q/k norms") && Contains("export it as Qwen3ForCausalLM"));
  CHECK_THROWS_WITH(export_model(dir, config, "Qwen2ForCausalLM"), Contains("Qwen2ForCausalLM has no q/k norms"));
  CHECK_THROWS_WITH(export_model(dir, plain, "Qwen3ForCausalLM"),
                    Contains("Qwen3ForCausalLM always has the per-head q/k norms"));
  CHECK_FALSE(fs::exists(dir));

  // attention_bias true: HF's Qwen3 then has an o_proj bias too, which the model lacks.
  auto j = qwen3_json();
  j["attention_bias"] = true;
  CHECK_THROWS_WITH(odc::io::hf_config_from_json(j, "ckpt/config.json"),
                    Contains("ckpt/config.json") && Contains("o_proj bias"));

  // A window shorter than the context on some layers: refused at load, before any tensor is read.
  const fs::path sliding = temp_dir() / "qwen3_sliding";
  export_model(sliding, config, "Qwen3ForCausalLM");
  j = read_json(sliding / "config.json");
  j["use_sliding_window"] = true;
  j["sliding_window"] = 16;
  j["max_window_layers"] = 1;
  write_json(sliding / "config.json", j);
  CHECK_THAT(error_of(sliding), Contains((sliding / "config.json").string()) &&
                                    Contains("use_sliding_window is true with sliding_window 16") &&
                                    Contains("layer 1"));
  j["max_window_layers"] = 2;  // no layer reaches the window: the same model
  write_json(sliding / "config.json", j);
  CHECK(error_of(sliding).empty());
}
