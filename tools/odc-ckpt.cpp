// odc-ckpt: Hugging Face checkpoint utilities. `init` writes a randomly initialized model in HF
// layout (the model's own initialization, so `odc-ckpt init --seed S` in f32 is exactly the model
// odc-train builds with model.seed=S); `inspect` prints what a checkpoint holds as one JSON line;
// `export`/`import` convert between native and HF checkpoints; `reshard` re-slices a native
// checkpoint for another number of ranks.
// Exit codes: 0 ok, 1 bad input (odc::Error), 2 usage error.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/command_line.h"
#include "cli/tool_main.h"
#include "odc/core/config.h"
#include "odc/core/dtype.h"
#include "odc/core/error.h"
#include "odc/core/logging.h"
#include "odc/data/tokenizer.h"
#include "odc/io/hf_checkpoint.h"
#include "odc/train/checkpoint/checkpoint_convert.h"
#include "odc/model/model_keys.h"
#include "odc/model/units.h"
#include "odc/train/config/config_schema.h"

namespace {

namespace fs = std::filesystem;

constexpr const char* kMainUsage = R"(usage: odc-ckpt <command> [options]

commands:
  init      write a randomly initialized model as a Hugging Face checkpoint directory
  inspect   print a checkpoint's architecture, dtype, parameter count and tensor shapes (JSON)
  export    write a native training checkpoint (checkpoint.dir/step-N) as a Hugging Face directory
  import    write a Hugging Face directory as a native checkpoint for N ranks (step 0)
  reshard   write a native checkpoint for another number of ranks (optimizer state and data position kept)

Run 'odc-ckpt <command> --help' for the options of a command.
)";

constexpr const char* kExportUsage = R"(usage: odc-ckpt export --from CKPT --out DIR [options]

Reassembles the model from every rank's shards of the native checkpoint CKPT (a step-N directory
written by odc-train with checkpoint.dir, any world size; or the checkpoint.dir itself: its newest
complete step) and writes a Hugging Face directory.
Prints a one-line JSON summary.

options:
  --from CKPT            native checkpoint directory (step-N, or checkpoint.dir = newest) (required)
  --out DIR              output directory (required)
  --dtype D              bf16, f16 or f32 (default: the dtype of the HF directory it replaces, else f32)
  --architecture NAME    LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM or Qwen3ForCausalLM
                         (default: Qwen3 when the model has q/k norms, Qwen2 when it has attention
                         biases, Mistral when it keeps a sliding window, else LlamaForCausalLM)
  --tokenizer-from DIR   copy tokenizer.json and friends from this directory (default: keep those of
                         the HF directory it replaces, else those of the run's model.checkpoint)
  --max-shard-bytes N    largest safetensors file before splitting into shards of whole units
                         (default 5000000000); the model is streamed, a piece at a time
  --accept-manifest-without-checksum
                         read a checkpoint whose manifest has no manifest_checksum (written before
                         manifests carried one, or the field deleted: an edit goes undetected), with
                         a warning; without it such a checkpoint is refused, as odc-train refuses it
  -h, --help             show this help
)";

constexpr const char* kImportUsage = R"(usage: odc-ckpt import --from DIR --out CKPT_DIR --world-size N

Writes the Hugging Face checkpoint DIR as a native checkpoint for N ranks: CKPT_DIR/step-00000000
with the masters sharded as odc-train shards them, zero AdamW moments and no data position (a run
with checkpoint.dir=CKPT_DIR resumes from it and starts its data from the beginning).

options:
  --from DIR             Hugging Face checkpoint directory (required)
  --out CKPT_DIR         checkpoint.dir to write into (required)
  --world-size N         number of ranks of the runs that will resume from it (required)
  -h, --help             show this help
)";

constexpr const char* kReshardUsage = R"(usage: odc-ckpt reshard IN OUT --world-size N

Writes the native checkpoint IN (a step-N directory written by odc-train on any number of ranks)
as a checkpoint for N ranks: OUT/step-N with every unit's master weights and AdamW moments
re-sliced onto N ranks' shards, and IN's manifest (run, lineage, optimizer step, data position)
with "resharded_from". A run with checkpoint.dir=OUT on N ranks and the same global minibatch
(data.minibatch_size x ranks) continues IN's run. OUT must be a new or empty directory, not IN's.
(odc-train also reshards by itself when it resumes on another number of ranks.)

options:
  --world-size N         number of ranks of the runs that will resume from it (required)
  --accept-manifest-without-checksum
                         reshard a checkpoint whose manifest has no manifest_checksum (written before
                         manifests carried one, or the field deleted: an edit goes undetected), with
                         a warning (the new manifest's checksum covers its values as they are);
                         without it such a checkpoint is refused, as odc-train refuses it
  -h, --help             show this help
)";

constexpr const char* kInitUsage = R"(usage: odc-ckpt init --out DIR [--config CONFIG.json] [--set model.config.KEY=VALUE]... [options]

Writes DIR/config.json and DIR/model.safetensors (or shards + model.safetensors.index.json) of a
model initialized the way odc-train initializes one (model.seed), then prints a one-line JSON
summary. The model config is odc-train's default model.config, or the Hugging Face config.json
given with --config, with --set assignments laid over it. An existing DIR is replaced only if it
is an HF checkpoint; the new one appears atomically.

options:
  --out DIR              output directory (required)
  --config FILE          Hugging Face config.json to take the model shape from
  --set model.config.KEY=VALUE
                         set one config.json field (repeatable), e.g. --set model.config.hidden_size=64
  --architecture NAME    LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM or Qwen3ForCausalLM
                         (default: the config's "architectures" or "model_type", else Qwen3ForCausalLM
                         when qk_norm is true, Qwen2ForCausalLM when attention_bias is true, else
                         LlamaForCausalLM)
  --dtype D              bf16, f16 or f32 (default bf16)
  --seed N               initialization seed (default 0)
  --tokenizer PATH       copy tokenizer.json (+ tokenizer_config.json, special_tokens_map.json,
                         generation_config.json) from this directory, or this tokenizer.json file;
                         the model's vocab_size is then the tokenizer's unless set
  --max-shard-bytes N    largest safetensors file before splitting into shards (default 5000000000)
  -h, --help             show this help
)";

constexpr const char* kInspectUsage = R"(usage: odc-ckpt inspect DIR

Validates the Hugging Face checkpoint DIR (config.json against every tensor) and prints one JSON
line: dir, architecture, model_type, dtype, parameters, bytes, files, config and the shape of
every tensor.

options:
  -h, --help             show this help
)";

const odc::TunableSpec& trainer_model_config_spec() {
  static const auto specs = odc::train::trainer_tunables();
  for (const auto& spec : specs) {
    if (spec.path == "model.config") return spec;
  }
  odc::fail("odc-train declares no model.config tunable");
}

// The config.json fields: the file (or odc-train's default model) with the --set assignments over
// it, through odc::Config so that --set means what it means for odc-train.
nlohmann::json model_config_json(const odc::cli::Arguments& args, const std::string& config_file,
                                 const std::vector<std::string>& assignments) {
  odc::TunableSpec spec = trainer_model_config_spec();
  // A file replaces the default model entirely: its absent fields take HF's defaults, not ours.
  if (!config_file.empty()) spec.default_value.clear();
  odc::Config config({spec});
  if (!config_file.empty()) {
    std::ifstream in(config_file, std::ios::binary);
    if (!in) odc::fail("cannot open model config '{}'", config_file);
    nlohmann::json file;
    try {
      file = nlohmann::json::parse(std::string(std::istreambuf_iterator<char>(in), {}));
    } catch (const nlohmann::json::exception& e) {
      odc::fail("model config '{}' is not valid JSON: {}", config_file, e.what());
    }
    if (!file.is_object()) odc::fail("model config '{}' is not a JSON object of config.json fields", config_file);
    // JSON is YAML: one flow mapping.
    config.load_yaml_text(nlohmann::json{{"model", {{"config", file}}}}.dump(), config_file);
  }
  for (const auto& assignment : assignments) {
    if (assignment.rfind("model.config.", 0) != 0) {
      throw args.usage_error("--set only sets model.config.KEY=VALUE, got '" + assignment + "'");
    }
    try {
      config.apply_assignment(assignment);
    } catch (const odc::Error& e) {
      throw args.usage_error(e.what());
    }
  }
  if (!odc::keys::model_config.is_set(config)) odc::fail("model config '{}' is empty", config_file);
  return odc::train::yaml_to_json(odc::keys::model_config.read(config));
}

// --set keys are typed by users, so a misspelt one is an error even when the file's other
// unknown fields (config.json carries many) are not.
void check_assigned_keys(const nlohmann::json& merged, const odc::model::LlamaConfig& parsed,
                         const std::vector<std::string>& assignments) {
  // config.json's window fields were read (and checked) by the Hugging Face parse, which turned
  // them into attention_window; model.config's rules (which refuse sliding_window) do not apply.
  static const std::set<std::string> kHfWindowFields = {"sliding_window", "use_sliding_window", "max_window_layers"};
  nlohmann::json probe = parsed.to_json();
  for (const auto& assignment : assignments) {
    const std::string key = assignment.substr(13, assignment.find_first_of(".=", 13) - 13);
    if (merged.contains(key) && kHfWindowFields.count(key) == 0) probe[key] = merged.at(key);
    const bool asks_window = key == "sliding_window" && merged.contains(key) && merged.at(key).is_number() &&
                             merged.at(key).get<double>() > 0;
    if (asks_window && parsed.attention_window == 0) {
      odc::fail("--set model.config.sliding_window: this model would keep no sliding window (transformers "
                "ignores the field here); use --architecture MistralForCausalLM, or Qwen2ForCausalLM with "
                "--set model.config.use_sliding_window=true --set model.config.max_window_layers=0");
    }
  }
  odc::model::LlamaConfig::from_json(probe, "--set model.config", true);
}

// --dtype D of init and export: a dtype Hugging Face checkpoints are written in, by any of its
// names (bf16, bfloat16, ...).
odc::DType checkpoint_dtype(const odc::cli::Arguments& args, const std::string& fallback) {
  const std::string name = args.value_or("--dtype", fallback);
  try {
    const odc::DType dtype = odc::parse_dtype(name);
    if (dtype == odc::DType::bf16 || dtype == odc::DType::f16 || dtype == odc::DType::f32) return dtype;
  } catch (const odc::Error&) {
    // reported below with the accepted values
  }
  throw args.usage_error("--dtype expects bf16, f16 or f32, got '" + name + "'");
}

int run_init(const odc::cli::Arguments& args) {
  const std::string out_dir = args.required("--out", "DIR");
  const std::string config_file = args.value_or("--config", "");
  std::string architecture = args.value_or("--architecture", "");
  const std::string tokenizer = args.value_or("--tokenizer", "");
  const std::vector<std::string> assignments = args.assignments();
  const odc::DType dtype = checkpoint_dtype(args, "bf16");
  const auto seed = args.integer<std::uint64_t>("--seed", 0);
  const std::int64_t max_shard_bytes = args.integer("--max-shard-bytes", 5'000'000'000, odc::Range::at_least(1));

  nlohmann::json fields = model_config_json(args, config_file, assignments);
  const std::string where = config_file.empty() ? std::string("model.config") : config_file;
  if (architecture.empty()) {
    const bool named = fields.contains("architectures") || fields.contains("model_type");
    if (!named) {
      auto flag = [&](const char* key) {
        const auto field = fields.find(key);
        return field != fields.end() && field->is_boolean() && field->get<bool>();
      };
      architecture = flag("qk_norm")          ? "Qwen3ForCausalLM"
                     : flag("attention_bias") ? "Qwen2ForCausalLM"
                                              : "LlamaForCausalLM";
    }
  } else {
    (void)odc::io::hf_model_type(architecture);  // odc::Error naming the supported ones
  }
  if (!architecture.empty()) {
    fields["architectures"] = {architecture};
    fields["model_type"] = odc::io::hf_model_type(architecture);
  }
  std::string copy_from;
  if (!tokenizer.empty()) {
    if (fs::is_directory(tokenizer)) {
      copy_from = tokenizer;
    } else if (fs::path(tokenizer).filename() == "tokenizer.json" && fs::exists(tokenizer)) {
      copy_from = fs::path(tokenizer).parent_path().string();
      if (copy_from.empty()) copy_from = ".";
    } else {
      odc::fail("--tokenizer '{}': expected a directory holding tokenizer.json or a tokenizer.json file", tokenizer);
    }
    if (!fs::exists(fs::path(copy_from) / "tokenizer.json")) {
      odc::fail("--tokenizer '{}': no tokenizer.json there", tokenizer);
    }
  }

  // The model's vocabulary follows the tokenizer unless the user gave one; one smaller than the
  // tokenizer's would let it emit ids the embedding does not have.
  const bool vocab_given = (!config_file.empty() && fields.contains("vocab_size")) ||
                           std::any_of(assignments.begin(), assignments.end(), [](const std::string& a) {
                             return a.rfind("model.config.vocab_size=", 0) == 0;
                           });
  if (!copy_from.empty()) {
    const auto vocab = odc::data::Tokenizer::from_file((fs::path(copy_from) / "tokenizer.json").string()).vocab_size();
    if (!vocab_given) {
      fields["vocab_size"] = vocab;
    } else if (fields.value("vocab_size", std::int64_t{0}) < vocab) {
      odc::fail("model.config.vocab_size {} is smaller than the tokenizer's {} tokens ({}); drop the setting to take "
                "the tokenizer's, or set at least {}",
                fields.value("vocab_size", std::int64_t{0}), vocab, (fs::path(copy_from) / "tokenizer.json").string(), vocab);
    }
  }
  const auto config = odc::io::hf_config_from_json(fields, where, &architecture);
  // Loading follows transformers, which ignores attention_bias for Qwen2 and Mistral; a user who
  // asks for the opposite of what the architecture has gets an error, not a silent override.
  if (const auto bias = fields.find("attention_bias"); bias != fields.end() && bias->is_boolean()) {
    auto asked = config;
    asked.attention_bias = bias->get<bool>();
    odc::io::check_hf_architecture(architecture, asked, where);
  }
  check_assigned_keys(fields, config, assignments);

  const auto units = odc::model::build_unit_layouts(config);
  odc::io::write_hf_checkpoint(
      out_dir, config, architecture, dtype,
      [&](int unit, float* out) {
        const auto& layout = units[static_cast<std::size_t>(unit)];
        odc::model::init_unit_range(layout, config, seed, 0, layout.numel, out);
      },
      max_shard_bytes, copy_from);

  // The summary comes from the written checkpoint as a loader sees it, which also proves it loads.
  const odc::io::HfCheckpoint written(out_dir);
  const nlohmann::ordered_json summary = {
      {"out", out_dir},
      {"architecture", written.architecture()},
      {"dtype", odc::dtype_name(written.dtype())},
      {"parameters", written.config().num_parameters()},
      {"files", written.tensors().files().size()},
      {"seed", seed},
  };
  std::cout << summary.dump() << '\n';
  return 0;
}

int run_inspect(const odc::cli::Arguments& args) {
  const std::string dir = args.positional(0);
  if (dir.empty()) throw args.usage_error("DIR is required");

  const odc::io::HfCheckpoint ckpt(dir);
  nlohmann::ordered_json files = nlohmann::ordered_json::array();
  nlohmann::ordered_json shapes = nlohmann::ordered_json::object();
  std::uint64_t bytes = 0;
  for (const auto& file : ckpt.tensors().files()) {
    files.push_back(fs::path(file.path()).filename().string());
    for (const auto& name : file.names()) {
      shapes[name] = file.info(name).shape;
      bytes += file.info(name).bytes.size();
    }
  }
  nlohmann::json config = ckpt.config().to_json();
  config["architectures"] = {ckpt.architecture()};
  config["model_type"] = odc::io::hf_model_type(ckpt.architecture());
  const nlohmann::ordered_json summary = {
      {"dir", dir},
      {"architecture", ckpt.architecture()},
      {"model_type", odc::io::hf_model_type(ckpt.architecture())},
      {"dtype", odc::dtype_name(ckpt.dtype())},
      {"parameters", ckpt.config().num_parameters()},
      {"bytes", bytes},
      {"files", files},
      {"config", config},
      {"tensors", shapes},
  };
  std::cout << summary.dump() << '\n';
  return 0;
}

// The dtype an existing HF directory at `dir` is stored in (its config.json's torch_dtype), or "".
std::string existing_hf_dtype(const std::string& dir) {
  std::ifstream in(std::filesystem::path(dir) / "config.json");
  if (!in) return "";
  const auto json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains("torch_dtype") || !json["torch_dtype"].is_string()) return "";
  return json["torch_dtype"].get<std::string>();
}

int run_export(const odc::cli::Arguments& args) {
  const std::string from = args.required("--from", "CKPT");
  const std::string out = args.required("--out", "DIR");
  // Replacing an HF directory keeps its dtype unless --dtype says otherwise (as the trainer's
  // export_dtype: auto keeps the source's); a new directory gets float32.
  const std::string kept = existing_hf_dtype(out);
  const odc::DType dtype = checkpoint_dtype(args, kept.empty() ? "f32" : kept);
  const std::string architecture = args.value_or("--architecture", "");
  const std::string tokenizer_from = args.value_or("--tokenizer-from", "");
  const std::int64_t max_shard_bytes = args.integer("--max-shard-bytes", 5'000'000'000, odc::Range::at_least(1));
  const auto step = odc::train::export_native_to_hf(from, out, dtype, architecture, tokenizer_from, max_shard_bytes,
                                                    args.flag("--accept-manifest-without-checksum"));
  std::cout << nlohmann::json{{"from", from}, {"out", out}, {"step", step}, {"dtype", odc::dtype_name(dtype)}}.dump() << '\n';
  return 0;
}

int run_import(const odc::cli::Arguments& args) {
  const std::string from = args.required("--from", "DIR");
  const std::string out = args.required("--out", "CKPT_DIR");
  const int world = args.required_integer<int>("--world-size", "N", odc::Range::at_least(1));
  const auto path = odc::train::import_hf_to_native(from, out, world);
  std::cout << nlohmann::json{{"from", from}, {"checkpoint", path}, {"world_size", world}}.dump() << '\n';
  return 0;
}

int run_reshard(const odc::cli::Arguments& args) {
  const std::string in = args.positional(0);
  const std::string out = args.positional(1);
  if (in.empty() || out.empty()) throw args.usage_error("IN and OUT are required");
  const int world = args.required_integer<int>("--world-size", "N", odc::Range::at_least(1));
  const auto path = odc::train::reshard_native(in, out, world, args.flag("--accept-manifest-without-checksum"));
  std::cout << nlohmann::json{{"from", in}, {"checkpoint", path}, {"world_size", world}}.dump() << '\n';
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using odc::cli::Command;
  using odc::cli::Takes;
  const std::vector<odc::cli::Subcommand> subcommands = {
      {"init",
       Command{"", kInitUsage,
               {{"--out"}, {"--config"}, {"--set", Takes::values}, {"--architecture"}, {"--dtype"}, {"--seed"},
                {"--tokenizer"}, {"--max-shard-bytes"}}},
       run_init},
      {"inspect", Command{"", kInspectUsage, {}, "checkpoint directory", 1}, run_inspect},
      {"export", Command{"", kExportUsage, {{"--from"}, {"--out"}, {"--dtype"}, {"--architecture"}, {"--tokenizer-from"},
                                       {"--max-shard-bytes"}, {"--accept-manifest-without-checksum", Takes::nothing}}},
       run_export},
      {"import", Command{"", kImportUsage, {{"--from"}, {"--out"}, {"--world-size"}}}, run_import},
      {"reshard",
       Command{"", kReshardUsage, {{"--world-size"}, {"--accept-manifest-without-checksum", Takes::nothing}},
               "checkpoint directory", 2},
       run_reshard},
  };
  return odc::cli::run_tool("odc-ckpt", [&] {
    // Warnings (e.g. an unimplemented sliding window) go to stderr: stdout is the JSON line.
    odc::setup_logging(0, 1, "warn");
    return odc::cli::run_subcommand("odc-ckpt", kMainUsage, subcommands, argc, argv);
  });
}
