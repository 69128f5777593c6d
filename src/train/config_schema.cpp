#include "odc/train/config_schema.h"

#include <cctype>
#include <filesystem>
#include <fstream>

#include "odc/core/error.h"
#include "odc/io/hf_checkpoint.h"

namespace odc::train {

namespace {
TunableSpec spec(std::string path, ValueKind kind, std::string default_value, std::string doc,
                 std::vector<std::string> choices = {}, bool required = false) {
  return {std::move(path), kind, std::move(default_value), std::move(doc), std::move(choices), required};
}
}  // namespace

std::vector<TunableSpec> trainer_tunables() {
  using K = ValueKind;
  return {
      // model
      spec("model.config", K::map,
       "{vocab_size: 64, hidden_size: 256, intermediate_size: 688, num_hidden_layers: 6, "
       "num_attention_heads: 8, num_key_value_heads: 4, rms_norm_eps: 1.0e-5, rope_theta: 10000.0, "
       "max_position_embeddings: 4096, tie_word_embeddings: false}",
       "Hugging Face config.json fields of the model to train from random initialization"),
      spec("model.checkpoint", K::string, "\"\"",
           "Hugging Face checkpoint directory (config.json + safetensors) to fine-tune; its config.json "
           "replaces model.config (empty = random initialization from model.config)"),
      spec("model.dtype", K::string, "float32", "compute dtype (the CPU backend computes in float32)",
       {"float32"}),
      spec("model.seed", K::integer, "0", "seed of the random initialization (same model on every world size)"),
      // data
      spec("data.train", K::string, "", "training data file", {}, true),
      spec("data.format", K::string, "tokens",
       "data format: tokens = pre-tokenized JSONL {\"input_ids\": [...], \"loss_mask\": [...]}; bin = "
       "binary PREFIX.bin + PREFIX.idx written by odc-data convert (memory-mapped); chat = JSONL of "
       "{\"messages\": [...]}, {\"prompt\", \"completion\"} or {\"text\"} records, tokenized with "
       "data.tokenizer and data.chat_template (loss on assistant turns / completions); text = JSONL of "
       "{\"text\": ...} records (loss on all tokens)",
       {"tokens", "bin", "chat", "text"}),
      spec("data.tokenizer", K::string, "\"\"",
       "tokenizer.json for data.format chat/text; empty = <model.checkpoint>/tokenizer.json"),
      spec("data.chat_template", K::string, "auto",
       "chat template of data.format chat: llama3, chatml (Qwen), or auto (from tokenizer_config.json "
       "next to the tokenizer, else from its special tokens)",
       {"auto", "llama3", "chatml"}),
      spec("data.minibatch_size", K::integer, "4", "sequences per rank per optimizer step"),
      spec("data.max_tokens_per_microbatch", K::integer, "0",
       "token cap of a packed microbatch; 0 = the longest sequence of the dataset times packing_ratio"),
      spec("data.packing_ratio", K::number, "1.0", "multiplies the default token cap (ignored when a cap is set)"),
      spec("data.balance", K::string, "auto",
           "how the global minibatch is split over ranks and microbatches: local_sort, lb_micro (equal "
           "microbatch counts), lb_mini (balances whole-minibatch work; odc only); auto = lb_mini with odc, "
           "lb_micro with collective; round_robin = no balancing (items r, r+N, ... packed in order)",
           {"auto", "local_sort", "lb_micro", "lb_mini", "round_robin"}),
      spec("data.cost_model", K::string, "flops",
           "per-sequence cost the balancers equalize: linear (tokens), quadratic (cost_a*s^2 + cost_b*s), "
           "flops (from the model shape)",
           {"linear", "quadratic", "flops"}),
      spec("data.cost_a", K::number, "0.0", "quadratic cost model: coefficient of s^2 (odc-bench calibrate fits it)"),
      spec("data.cost_b", K::number, "1.0", "quadratic cost model: coefficient of s"),
      spec("data.shuffle", K::boolean, "true", "shuffle the dataset every epoch"),
      spec("data.seed", K::integer, "0", "seed of the data order"),
      // train
      spec("train.comm", K::string, "odc", "communication: odc (on-demand) or collective (FSDP-style)",
       {"odc", "collective"}),
      spec("train.steps", K::integer, "200", "optimizer steps (minibatches) to run"),
      spec("train.lr", K::number, "3.0e-3", "peak learning rate"),
      spec("train.min_lr", K::number, "3.0e-4", "learning rate at the end of the decay"),
      spec("train.warmup_steps", K::integer, "20", "linear warmup steps"),
      spec("train.schedule", K::string, "cosine", "decay after warmup", {"cosine", "linear", "constant"}),
      spec("train.weight_decay", K::number, "0.01", "decoupled weight decay (matrices only)"),
      spec("train.beta1", K::number, "0.9", "AdamW beta1"),
      spec("train.beta2", K::number, "0.95", "AdamW beta2"),
      spec("train.eps", K::number, "1.0e-8", "AdamW epsilon"),
      spec("train.grad_clip", K::number, "1.0", "global gradient-norm clip; 0 disables"),
      spec("train.loss_reduction", K::string, "token",
       "token = mean over all target tokens of the global minibatch; sequence = mean over sequences "
       "of each sequence's mean token loss",
       {"token", "sequence"}),
      spec("train.threads", K::integer, "1", "compute threads per rank (BLAS)"),
      spec("train.metrics_file", K::string, "\"\"", "JSON lines of per-step metrics (empty = none)"),
      spec("train.trace_file", K::string, "\"\"",
           "Chrome trace-event JSON of the per-rank timeline (one track per rank; opens in Perfetto); "
           "written by rank 0 at the end (empty = none)"),
      spec("train.trace_steps", K::integer, "20", "trace only the first N steps (0 = all; a trace holds every unit of every microbatch)"),
      spec("train.peak_flops", K::number, "0",
           "peak FLOP/s of one rank for MFU; 0 = measured by an sgemm at start-up (CPU)"),
      spec("train.log_every", K::integer, "1", "log a progress line every N steps"),
      spec("train.log_level", K::string, "info", "log level", {"trace", "debug", "info", "warn", "error"}),
      // comm
      spec("comm.chunk_bytes", K::integer, "1048576", "bytes per one-sided get or gradient push message (ODC)"),
      spec("comm.max_inflight", K::integer, "8", "ODC messages in flight per rank"),
      spec("comm.direct_load", K::boolean, "true",
           "ODC gathers copy straight from peers' shards where UCX maps them (shared memory); false forces "
           "ucp_get through the progress thread"),
      spec("comm.timeout_s", K::number, "600", "a wait on a peer longer than this is an error naming the peer"),
      // debug
      // checkpoint
      spec("checkpoint.dir", K::string, "\"\"",
           "directory of native checkpoints (step-N/: per-rank shards, optimizer state, data position); empty = none"),
      spec("checkpoint.every", K::integer, "0", "save every N steps (0 = only at the end of the run)"),
      spec("checkpoint.keep", K::integer, "3", "keep the newest K checkpoints (0 = all)"),
      spec("checkpoint.resume", K::string, "auto",
           "auto = continue from the newest complete checkpoint in checkpoint.dir if there is one; never; or a "
           "checkpoint directory (step-N) to continue from"),
      spec("checkpoint.export_hf", K::string, "\"\"",
           "at the end of the run, write the trained model as a Hugging Face directory here (config.json, "
           "safetensors, tokenizer files copied from model.checkpoint); empty = no export"),
      spec("checkpoint.export_dtype", K::string, "auto",
           "dtype of the exported tensors; auto = model.checkpoint's dtype, else float32",
           {"auto", "float32", "bfloat16", "float16"}),
      spec("train.stop_at_step", K::integer, "0",
           "end this run (after checkpointing) once this many steps are done, without changing the schedule "
           "of train.steps (0 = run to train.steps)"),
      spec("debug.checkpoint_delay_ms", K::number, "0",
           "sleep after writing this rank's checkpoint shards, before the commit (crash-safety tests)"),
      spec("debug.checkpoint_delay_rank", K::integer, "-1",
           "the rank that sleeps debug.checkpoint_delay_ms (-1: every rank; rank-failure tests)"),
      spec("debug.slow_rank", K::integer, "-1", "rank that sleeps debug.delay_ms before each microbatch (-1: none)"),
      spec("debug.delay_ms", K::number, "0", "injected per-microbatch delay of debug.slow_rank (straggler studies)"),
  };
}

Config load_trainer_config(const CommandLine& command_line) {
  Config config(trainer_tunables());
  if (!command_line.config_file.empty()) config.load_yaml_file(command_line.config_file);
  config.apply_environment();
  for (const auto& assignment : command_line.assignments) config.apply_assignment(assignment);
  return config;
}

nlohmann::json yaml_to_json(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined: return nullptr;
    case YAML::NodeType::Sequence: {
      auto arr = nlohmann::json::array();
      for (const auto& item : node) arr.push_back(yaml_to_json(item));
      return arr;
    }
    case YAML::NodeType::Map: {
      auto obj = nlohmann::json::object();
      for (const auto& kv : node) obj[kv.first.as<std::string>()] = yaml_to_json(kv.second);
      return obj;
    }
    case YAML::NodeType::Scalar: break;
  }
  const std::string text = node.Scalar();
  if (node.Tag() == "!") return text;  // explicitly quoted: a string
  if (text == "true" || text == "True" || text == "TRUE") return true;
  if (text == "false" || text == "False" || text == "FALSE") return false;
  if (text == "null" || text == "~" || text == "Null" || text.empty()) return nullptr;
  const bool looks_integer = !text.empty() && text.find_first_not_of("+-0123456789") == std::string::npos &&
                             std::isdigit(static_cast<unsigned char>(text.back()));
  if (looks_integer) {
    try {
      std::size_t used = 0;
      const long long v = std::stoll(text, &used);
      if (used == text.size()) return v;
    } catch (const std::exception&) {
    }
  }
  try {
    std::size_t used = 0;
    const double v = std::stod(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  return text;
}

model::LlamaConfig model_config_from(const Config& config) {
  return model::LlamaConfig::from_json(yaml_to_json(config.get_map("model.config")), "model.config", true);
}

model::LlamaConfig training_model_config(const Config& config) {
  const std::string checkpoint = config.get_string("model.checkpoint");
  if (checkpoint.empty()) return model_config_from(config);
  const auto path = std::filesystem::path(checkpoint) / "config.json";
  std::ifstream in(path);
  if (!in) fail("model.checkpoint: cannot read '{}' (a Hugging Face checkpoint directory holds config.json)", path.string());
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("model.checkpoint: '{}' is not valid JSON: {}", path.string(), e.what());
  }
  return io::hf_config_from_json(json, path.string());
}

}  // namespace odc::train
