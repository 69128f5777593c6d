// Hugging Face checkpoint adapter: export from unit buffers, load back by unit range, bit-exact
// dtype round trips, sharding, crash-safe replacement, and a clear error for every kind of
// mismatch between config.json and the tensors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "odc/core/dtype.h"
#include "odc/core/error.h"
#include "odc/io/hf_checkpoint.h"
#include "odc/io/safetensors.h"
#include "odc/io/safetensors_writer.h"
#include "odc/model/llama_config.h"
#include "odc/model/units.h"
#include "unit/temp_dir.h"

namespace {

namespace fs = std::filesystem;
using odc::io::HfCheckpoint;
using odc::model::LlamaConfig;

// A per-process scratch directory, removed when the test binary exits.
fs::path temp_dir() {
  static const odc::test::TempDir dir("hf_checkpoint");
  return dir.path();
}

LlamaConfig tiny_config(bool qwen2) {
  nlohmann::json j = {{"vocab_size", 37},        {"hidden_size", 16},       {"intermediate_size", 24},
                      {"num_hidden_layers", 2},  {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                      {"tie_word_embeddings", qwen2}, {"attention_bias", qwen2}};
  return LlamaConfig::from_json(j, "test config", true);
}

// Initialized values with the constant tensors (norms, biases) made non-constant, so a mix-up of
// two same-shaped tensors is visible.
void fill_unit(const LlamaConfig& config, std::uint64_t seed, int unit, float* out) {
  const auto units = odc::model::build_unit_layouts(config);
  const auto& layout = units[static_cast<std::size_t>(unit)];
  odc::model::init_unit_range(layout, config, seed, 0, layout.numel, out);
  for (const auto& t : layout.tensors) {
    if (t.init == odc::model::InitKind::normal) continue;
    for (std::int64_t i = 0; i < t.numel; ++i) out[t.offset + i] += 0.01f * static_cast<float>(i % 7) - 0.02f;
  }
}

void export_model(const fs::path& dir, const LlamaConfig& config, const std::string& architecture,
                  odc::DType dtype, std::int64_t max_shard_bytes = 5'000'000'000, const std::string& copy_from = "") {
  odc::io::write_hf_checkpoint(dir.string(), config, architecture, dtype,
                               [&](int unit, float* out) { fill_unit(config, 5, unit, out); }, max_shard_bytes,
                               copy_from);
}

std::vector<float> read_unit(const HfCheckpoint& ckpt, int unit) {
  std::vector<float> out(static_cast<std::size_t>(ckpt.units()[static_cast<std::size_t>(unit)].numel));
  ckpt.read_unit_range(unit, 0, static_cast<std::int64_t>(out.size()), out.data());
  return out;
}

std::string error_of(const fs::path& dir) {
  try {
    HfCheckpoint ckpt(dir.string());
  } catch (const odc::Error& e) {
    return e.what();
  }
  return "";
}

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

void write_json(const fs::path& path, const nlohmann::json& j) { std::ofstream(path) << j.dump(2); }

// Every tensor of a single-file checkpoint as f32, to rewrite it with changes.
struct Tensors {
  std::vector<std::string> order;
  std::map<std::string, std::pair<odc::Shape, std::vector<float>>> values;
  void write(const fs::path& path) const {
    std::vector<odc::io::SafetensorsEntry> entries;
    for (const auto& name : order) {
      const auto& [shape, data] = values.at(name);
      entries.push_back({name, odc::DType::f32, shape, data.data()});
    }
    odc::io::write_safetensors(path.string(), entries);
  }
};

Tensors load_tensors(const fs::path& path) {
  odc::io::SafetensorsFile file(path.string());
  Tensors t;
  for (const auto& name : file.names()) {
    t.order.push_back(name);
    t.values[name] = {file.info(name).shape, file.read_f32(name)};
  }
  return t;
}

}  // namespace

TEST_CASE("HF export then load gives the unit buffers back (f32, LLaMA, untied, GQA)", "[io]") {
  const fs::path dir = temp_dir() / "llama_f32";
  const LlamaConfig config = tiny_config(false);
  export_model(dir, config, "LlamaForCausalLM", odc::DType::f32);
  CHECK_FALSE(fs::exists(dir.string() + ".tmp"));
  CHECK(fs::exists(dir / "model.safetensors"));
  CHECK_FALSE(fs::exists(dir / "model.safetensors.index.json"));

  const auto cfg = read_json(dir / "config.json");
  CHECK(cfg.at("architectures") == nlohmann::json::array({"LlamaForCausalLM"}));
  CHECK(cfg.at("model_type") == "llama");
  CHECK(cfg.at("torch_dtype") == "float32");
  CHECK(cfg.at("num_key_value_heads") == 2);
  CHECK(cfg.at("head_dim") == 4);

  const HfCheckpoint ckpt(dir.string());
  CHECK(ckpt.architecture() == "LlamaForCausalLM");
  CHECK(ckpt.dtype() == odc::DType::f32);
  CHECK(ckpt.config().to_json() == config.to_json());
  CHECK(ckpt.tensors().contains("lm_head.weight"));
  const auto units = odc::model::build_unit_layouts(config);
  REQUIRE(ckpt.units().size() == units.size());
  for (int u = 0; u < static_cast<int>(units.size()); ++u) {
    std::vector<float> expected(static_cast<std::size_t>(units[static_cast<std::size_t>(u)].numel));
    fill_unit(config, 5, u, expected.data());
    CHECK(read_unit(ckpt, u) == expected);
  }

  // A range that crosses tensor boundaries and runs into the padding of a sharded buffer.
  const auto& layer = units[1];
  std::vector<float> full(static_cast<std::size_t>(layer.numel));
  fill_unit(config, 5, 1, full.data());
  const std::int64_t begin = layer.tensors[1].offset - 3;
  std::vector<float> part(static_cast<std::size_t>(layer.numel - begin + 5), -1.0f);
  ckpt.read_unit_range(1, begin, static_cast<std::int64_t>(part.size()), part.data());
  for (std::size_t i = 0; i < part.size(); ++i) {
    const auto at = static_cast<std::size_t>(begin) + i;
    CHECK(part[i] == (at < full.size() ? full[at] : 0.0f));
  }
  CHECK_THROWS_WITH(ckpt.read_unit_range(9, 0, 1, part.data()), Catch::Contains("unit 9 out of range"));
}

TEST_CASE("HF export: Qwen2 with biases and tied embeddings, sharded, tokenizer copied", "[io]") {
  const fs::path source = temp_dir() / "tokenizer_source";
  fs::create_directories(source);
  std::ofstream(source / "tokenizer.json") << R"({"model": {"type": "BPE"}})";
  std::ofstream(source / "generation_config.json") << R"({"eos_token_id": 2})";
  write_json(source / "config.json", {{"bos_token_id", 1}, {"eos_token_id", 2}});

  const fs::path dir = temp_dir() / "qwen2_sharded";
  const LlamaConfig config = tiny_config(true);
  export_model(dir, config, "Qwen2ForCausalLM", odc::DType::bf16, 2000, source.string());
  CHECK(fs::exists(dir / "model.safetensors.index.json"));
  CHECK_FALSE(fs::exists(dir / "model.safetensors"));
  CHECK(fs::exists(dir / "tokenizer.json"));
  CHECK(fs::exists(dir / "generation_config.json"));
  CHECK_FALSE(fs::exists(dir / "special_tokens_map.json"));  // absent in the source: skipped

  const auto cfg = read_json(dir / "config.json");
  CHECK(cfg.at("model_type") == "qwen2");
  CHECK(cfg.at("torch_dtype") == "bfloat16");
  CHECK(cfg.at("tie_word_embeddings") == true);
  CHECK(cfg.at("eos_token_id") == 2);
  CHECK(cfg.at("bos_token_id") == 1);
  CHECK(cfg.at("use_sliding_window") == false);

  const HfCheckpoint ckpt(dir.string());
  CHECK(ckpt.tensors().sharded());
  CHECK(ckpt.tensors().files().size() > 2);
  for (const auto& file : ckpt.tensors().files()) {
    CHECK(fs::file_size(file.path()) <= 2000 + 4096);  // data <= limit; header on top
    CHECK(file.metadata().at("format") == "pt");
  }
  CHECK(ckpt.dtype() == odc::DType::bf16);
  CHECK(ckpt.config().attention_bias);
  CHECK(ckpt.config().tie_word_embeddings);
  CHECK_FALSE(ckpt.tensors().contains("lm_head.weight"));  // tied: stored once
  CHECK(ckpt.tensors().info("model.layers.1.self_attn.k_proj.bias").shape == odc::Shape{8});
  // bf16 values are the rounded fp32 ones.
  std::vector<float> expected(static_cast<std::size_t>(ckpt.units()[1].numel));
  fill_unit(config, 5, 1, expected.data());
  const auto got = read_unit(ckpt, 1);
  for (std::size_t i = 0; i < got.size(); ++i) REQUIRE(got[i] == odc::bf16_to_f32(odc::f32_to_bf16(expected[i])));
}

TEST_CASE("HF round trip: bf16/f16 -> fp32 units -> same dtype is bit-identical", "[io]") {
  const auto dtype = GENERATE(odc::DType::bf16, odc::DType::f16);
  const LlamaConfig config = tiny_config(true);
  const fs::path first = temp_dir() / "roundtrip_a";
  const fs::path second = temp_dir() / "roundtrip_b";
  export_model(first, config, "Qwen2ForCausalLM", dtype, 3000);
  const HfCheckpoint a(first.string());
  // Re-export from what was read, single file this time: sharding must not matter either.
  odc::io::write_hf_checkpoint(second.string(), a.config(), a.architecture(), a.dtype(),
                               [&](int unit, float* out) {
                                 a.read_unit_range(unit, 0, a.units()[static_cast<std::size_t>(unit)].numel, out);
                               });
  const HfCheckpoint b(second.string());
  CHECK_FALSE(b.tensors().sharded());
  const auto names = a.tensors().names();
  REQUIRE(names == b.tensors().names());
  for (const auto& name : names) {
    const auto& x = a.tensors().info(name);
    const auto& y = b.tensors().info(name);
    REQUIRE(x.dtype == dtype);
    REQUIRE(y.dtype == dtype);
    REQUIRE(x.bytes.size() == y.bytes.size());
    CHECK(std::memcmp(x.bytes.data(), y.bytes.data(), x.bytes.size()) == 0);
  }
  CHECK(read_json(first / "config.json") == read_json(second / "config.json"));
}

TEST_CASE("HF export replaces an earlier export atomically and refuses foreign directories", "[io]") {
  const LlamaConfig config = tiny_config(false);
  const fs::path dir = temp_dir() / "replace";
  export_model(dir, config, "LlamaForCausalLM", odc::DType::bf16, 3000);
  REQUIRE(fs::exists(dir / "model.safetensors.index.json"));
  // The new export is a single file: no shard or index of the old one may survive.
  export_model(dir, config, "MistralForCausalLM", odc::DType::f32);
  CHECK_FALSE(fs::exists(dir / "model.safetensors.index.json"));
  CHECK_FALSE(fs::exists(dir.string() + ".old"));
  CHECK_FALSE(fs::exists(dir.string() + ".tmp"));
  CHECK(HfCheckpoint(dir.string()).architecture() == "MistralForCausalLM");
  CHECK(read_json(dir / "config.json").at("sliding_window").is_null());

  // A failing export (here: the unit source throws) leaves the previous one untouched.
  CHECK_THROWS_WITH(odc::io::write_hf_checkpoint(dir.string(), config, "LlamaForCausalLM", odc::DType::f32,
                                                 [](int unit, float*) {
                                                   if (unit == 2) odc::fail("gather of unit {} failed", unit);
                                                 }),
                    Catch::Contains("gather of unit 2 failed"));
  CHECK_FALSE(fs::exists(dir.string() + ".tmp"));
  CHECK(HfCheckpoint(dir.string()).architecture() == "MistralForCausalLM");

  const fs::path foreign = temp_dir() / "foreign";
  fs::create_directories(foreign);
  std::ofstream(foreign / "notes.txt") << "keep me";
  CHECK_THROWS_WITH(export_model(foreign, config, "LlamaForCausalLM", odc::DType::f32),
                    Catch::Contains("not an HF checkpoint") && Catch::Contains("refusing"));
  CHECK(fs::exists(foreign / "notes.txt"));
}

TEST_CASE("HF export rejects configs the architecture cannot express", "[io]") {
  const fs::path dir = temp_dir() / "bad_export";
  const LlamaConfig plain = tiny_config(false);
  const LlamaConfig biased = tiny_config(true);
  CHECK_THROWS_WITH(export_model(dir, plain, "Qwen2ForCausalLM", odc::DType::f32),
                    Catch::Contains("always has q/k/v biases"));
  CHECK_THROWS_WITH(export_model(dir, biased, "MistralForCausalLM", odc::DType::f32),
                    Catch::Contains("no attention biases"));
  CHECK_THROWS_WITH(export_model(dir, biased, "LlamaForCausalLM", odc::DType::f32),
                    Catch::Contains("o_proj bias"));
  CHECK_THROWS_WITH(export_model(dir, plain, "GPT2LMHeadModel", odc::DType::f32),
                    Catch::Contains("'GPT2LMHeadModel' is not supported") && Catch::Contains("Qwen2ForCausalLM"));
  CHECK_THROWS_WITH(export_model(dir, plain, "LlamaForCausalLM", odc::DType::f64),
                    Catch::Contains("float64"));
  CHECK_FALSE(fs::exists(dir));
}

TEST_CASE("HF checkpoint: every mismatch with config.json is a clear error", "[io]") {
  const LlamaConfig config = tiny_config(false);
  const fs::path good = temp_dir() / "good";
  export_model(good, config, "LlamaForCausalLM", odc::DType::f32);
  const fs::path dir = temp_dir() / "broken";
  fs::remove_all(dir);
  fs::copy(good, dir);
  const fs::path weights = dir / "model.safetensors";
  const fs::path config_path = dir / "config.json";
  REQUIRE(error_of(dir).empty());

  SECTION("missing config.json") {
    fs::remove(config_path);
    CHECK_THAT(error_of(dir), Catch::Contains("missing config.json") && Catch::Contains(dir.string()));
  }
  SECTION("config.json is not JSON") {
    std::ofstream(config_path) << "{\"vocab_size\": ";
    CHECK_THAT(error_of(dir), Catch::Contains("config.json") && Catch::Contains("not valid JSON"));
  }
  SECTION("unknown architecture") {
    auto j = read_json(config_path);
    j["architectures"] = {"GPT2LMHeadModel"};
    write_json(config_path, j);
    CHECK_THAT(error_of(dir), Catch::Contains("'GPT2LMHeadModel' is not supported") &&
                                  Catch::Contains("config.json"));
  }
  SECTION("no architecture at all") {
    auto j = read_json(config_path);
    j.erase("architectures");
    j.erase("model_type");
    write_json(config_path, j);
    CHECK_THAT(error_of(dir), Catch::Contains("neither \"architectures\" nor \"model_type\""));
  }
  SECTION("model_type alone names the architecture") {
    auto j = read_json(config_path);
    j.erase("architectures");
    write_json(config_path, j);
    CHECK(HfCheckpoint(dir.string()).architecture() == "LlamaForCausalLM");
  }
  SECTION("no weights") {
    fs::remove(weights);
    CHECK_THAT(error_of(dir), Catch::Contains("no model.safetensors"));
  }
  SECTION("truncated safetensors") {
    fs::resize_file(weights, fs::file_size(weights) - 10);
    CHECK_THAT(error_of(dir), Catch::Contains(weights.string()) && Catch::Contains("out of range"));
  }
  SECTION("shape not matching config.json") {
    auto j = read_json(config_path);
    j["intermediate_size"] = 32;
    write_json(config_path, j);
    CHECK_THAT(error_of(dir), Catch::Contains("'model.layers.0.mlp.up_proj.weight'") &&
                                  Catch::Contains("has shape [24, 16], but config.json implies [32, 16]") &&
                                  Catch::Contains(weights.string()));
  }
  SECTION("missing tensor") {
    auto t = load_tensors(weights);
    t.order.erase(std::find(t.order.begin(), t.order.end(), "model.layers.1.post_attention_layernorm.weight"));
    t.write(weights);
    CHECK_THAT(error_of(dir), Catch::Contains("missing tensor 'model.layers.1.post_attention_layernorm.weight'"));
  }
  SECTION("unexpected tensor") {
    auto t = load_tensors(weights);
    t.order.push_back("model.layers.0.self_attn.o_proj.bias");
    t.values["model.layers.0.self_attn.o_proj.bias"] = {{16}, std::vector<float>(16, 0.0f)};
    t.write(weights);
    CHECK_THAT(error_of(dir), Catch::Contains("unexpected tensor 'model.layers.0.self_attn.o_proj.bias'") &&
                                  Catch::Contains(weights.string()));
  }
  SECTION("several problems are listed together") {
    auto j = read_json(config_path);
    j["num_hidden_layers"] = 3;
    j["vocab_size"] = 40;
    write_json(config_path, j);
    const std::string error = error_of(dir);
    CHECK_THAT(error, Catch::Contains("missing tensor 'model.layers.2.mlp.up_proj.weight'") &&
                          Catch::Contains("'model.embed_tokens.weight'") && Catch::Contains("'lm_head.weight'"));
  }
  SECTION("unsupported dtype") {
    const auto t = load_tensors(weights);
    std::vector<odc::io::SafetensorsEntry> entries;
    std::vector<double> wide;
    for (const auto& name : t.order) {
      const auto& [shape, data] = t.values.at(name);
      if (name == "model.norm.weight") {
        wide.assign(data.begin(), data.end());
        entries.push_back({name, odc::DType::f64, shape, wide.data()});
      } else {
        entries.push_back({name, odc::DType::f32, shape, data.data()});
      }
    }
    odc::io::write_safetensors(weights.string(), entries);
    CHECK_THAT(error_of(dir), Catch::Contains("'model.norm.weight'") && Catch::Contains("dtype F64"));
  }
  SECTION("rotary buffers and a tied model's lm_head are ignored") {
    auto t = load_tensors(weights);
    t.order.push_back("model.layers.0.self_attn.rotary_emb.inv_freq");
    t.values["model.layers.0.self_attn.rotary_emb.inv_freq"] = {{2}, {1.0f, 0.01f}};
    t.write(weights);
    auto j = read_json(config_path);
    j["tie_word_embeddings"] = true;
    write_json(config_path, j);
    const HfCheckpoint ckpt(dir.string());
    CHECK(ckpt.config().tie_word_embeddings);
    CHECK(ckpt.units().back().tensors.size() == 1);  // the head unit holds only the final norm
  }
  SECTION("LLaMA with attention_bias is refused: HF's version has an o_proj bias") {
    auto j = read_json(config_path);
    j["attention_bias"] = true;
    write_json(config_path, j);
    CHECK_THAT(error_of(dir), Catch::Contains("o_proj bias"));
  }
}

TEST_CASE("HF checkpoint: a NaN or inf weight is refused as it is read, naming the tensor and the file", "[io]") {
  const LlamaConfig config = tiny_config(false);
  const fs::path dir = temp_dir() / "nonfinite";
  export_model(dir, config, "LlamaForCausalLM", odc::DType::f32);
  const float bad = GENERATE(std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity());
  const fs::path weights = dir / "model.safetensors";
  Tensors t = load_tensors(weights);
  t.values.at("model.layers.1.self_attn.v_proj.weight").second[3] = bad;
  t.write(weights);
  const HfCheckpoint ckpt(dir.string());  // the values are read unit by unit, not at open
  std::string error;
  for (int u = 0; u < static_cast<int>(ckpt.units().size()) && error.empty(); ++u) {
    try {
      (void)read_unit(ckpt, u);
    } catch (const odc::Error& e) {
      error = e.what();
    }
  }
  CHECK_THAT(error, Catch::Contains("tensor 'model.layers.1.self_attn.v_proj.weight'") &&
                        Catch::Contains(weights.string()) && Catch::Contains("holds a non-finite weight") &&
                        Catch::Contains("at element 3"));
  // A range that leaves the bad element out reads.
  const int unit = [&] {
    for (int u = 0; u < static_cast<int>(ckpt.units().size()); ++u) {
      for (const auto& slot : ckpt.units()[static_cast<std::size_t>(u)].tensors) {
        if (slot.name == "model.layers.1.self_attn.v_proj.weight") return u;
      }
    }
    return -1;
  }();
  REQUIRE(unit >= 0);
  std::vector<float> first(1);
  CHECK_NOTHROW(ckpt.read_unit_range(unit, 0, 1, first.data()));
}

TEST_CASE("HF config: Qwen2 always has biases, Mistral never", "[io]") {
  nlohmann::json j = {{"vocab_size", 37},       {"hidden_size", 16},      {"intermediate_size", 24},
                      {"num_hidden_layers", 1}, {"num_attention_heads", 4}, {"architectures", {"Qwen2ForCausalLM"}},
                      {"attention_bias", false}, {"some_future_field", 3}};
  std::string architecture;
  CHECK(odc::io::hf_config_from_json(j, "config.json", &architecture).attention_bias);
  CHECK(architecture == "Qwen2ForCausalLM");
  j["architectures"] = {"MistralForCausalLM"};
  j["attention_bias"] = true;
  CHECK_FALSE(odc::io::hf_config_from_json(j, "config.json").attention_bias);
  CHECK(odc::io::hf_model_type("MistralForCausalLM") == "mistral");
  CHECK_THROWS_WITH(odc::io::hf_model_type("Phi3ForCausalLM"), Catch::Contains("Phi3ForCausalLM"));
}
