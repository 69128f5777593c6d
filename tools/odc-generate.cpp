// odc-generate --model DIR --prompt TEXT [options]: continues a prompt with a Hugging Face
// checkpoint (greedy, or temperature + top-k/top-p sampling, with an optional repetition penalty
// and stop strings; a KV cache unless --no-cache) and prints the text.
// Exit codes: 0 ok, 1 bad input (odc::Error), 2 usage error.
#include <cstdio>
#include <filesystem>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/command_line.h"
#include "cli/compute_threads.h"
#include "cli/tool_main.h"
#include "odc/core/error.h"
#include "odc/core/logging.h"
#include "odc/data/chat_format.h"
#include "odc/data/tokenizer.h"
#include "odc/train/rollout/inference.h"

namespace {

constexpr const char* kUsage = R"(usage: odc-generate --model DIR --prompt TEXT [options]

Encodes TEXT with DIR/tokenizer.json (adding the tokenizer's special tokens, e.g. a BOS), then
generates until an end-of-sequence id (config.json / generation_config.json eos_token_id),
--max-new-tokens, a --stop string or the model's context (max_position_embeddings), and prints
the continuation. The prompt runs once and each new token once more over a KV cache of the
keys and values computed so far (--no-cache recomputes the whole sequence for every token).

options:
  --model DIR            Hugging Face checkpoint directory with tokenizer.json (required)
  --prompt TEXT          the prompt (required; "" generates from the BOS token alone, as
                         Hugging Face's generate does without input ids)
  --tokenizer PATH       tokenizer.json to use instead of DIR/tokenizer.json
  --max-new-tokens N     >= 0, default 64
  --temperature T        0 = greedy (default); > 0 samples from softmax(logits / T)
  --top-p P              nucleus sampling mass in (0, 1] with T > 0 (default 1.0)
  --top-k K              sample among the K most likely tokens with T > 0 (default 0 = off;
                         applied before --top-p)
  --repetition-penalty P penalize tokens of the prompt and output so far: logit / P if the logit
                         is > 0, else logit * P (greedy too; default 1 = off; P > 0)
  --stop STRING          stop once the output contains STRING (repeatable); the printed text
                         is cut before it (--json's completion_ids keep the ids that made it)
  --no-cache             recompute the whole sequence for every new token (no KV cache)
  --seed N               sampling seed (>= 0, default 0)
  --chat                 render TEXT as a user turn of the model's chat template (from
                         tokenizer_config.json or the special tokens) and answer as the assistant
  --chat-template T      auto (default), llama3 or chatml (with --chat)
  --json                 print a JSON line {"prompt", "completion", "prompt_ids", "completion_ids",
                         "finish_reason"} (finish_reason: eos, length, stop or context)
  --threads N            compute threads (default 1; at most 4 x the machine's hardware threads)
  -h, --help             this text
)";

odc::cli::Command command() {
  using odc::cli::Takes;
  return {"odc-generate", kUsage,
          {{"--model"}, {"--prompt"}, {"--tokenizer"}, {"--max-new-tokens"}, {"--temperature"}, {"--top-p"},
           {"--top-k"}, {"--repetition-penalty"}, {"--stop", Takes::values}, {"--no-cache", Takes::nothing},
           {"--seed"}, {"--chat", Takes::nothing}, {"--chat-template", Takes::value, "--chat"}, {"--json", Takes::nothing}, {"--threads"}}};
}

int run(const odc::cli::Arguments& args) {
  const std::string model_dir = args.required("--model", "DIR");
  // An empty prompt is a prompt (generation from BOS); only a missing --prompt is a mistake.
  const auto given_prompt = args.value("--prompt");
  if (!given_prompt) throw args.usage_error("--prompt TEXT is required");
  const std::string prompt = *given_prompt;
  std::string tokenizer_path = args.value_or("--tokenizer", "");
  odc::train::GenerateOptions options;
  // train::generate checks the sampling options too (the library's callers share its checks); here
  // every value is a command-line mistake (exit 2), found before the model is read.
  options.max_new_tokens = args.integer("--max-new-tokens", 64, odc::Range::at_least(0));
  options.temperature = args.number("--temperature", 0.0, odc::Range::at_least(0));
  options.top_p = args.number("--top-p", 1.0, odc::Range::above(0).and_at_most(1));
  options.top_k = args.integer("--top-k", 0);
  if (options.top_k < 0) throw args.usage_error(fmt::format("--top-k must be >= 0 (0 = off), got {}", options.top_k));
  // Greedy decoding draws nothing: a nucleus or a top-k would be ignored.
  if (options.temperature == 0.0 && (args.value("--top-p") || args.value("--top-k"))) {
    throw args.usage_error("--top-p and --top-k apply only to sampling (--temperature > 0); at temperature 0 "
                           "(greedy, the default) they would be ignored");
  }
  options.repetition_penalty = args.number("--repetition-penalty", 1.0);  // NaN and infinity: not numbers
  if (!(options.repetition_penalty > 0)) {
    throw args.usage_error(
        fmt::format("--repetition-penalty must be > 0 (1 = off), got {}", options.repetition_penalty));
  }
  options.stop = args.values("--stop");
  for (const auto& stop : options.stop) {
    if (stop.empty()) throw args.usage_error("--stop expects a non-empty string, got ''");
  }
  options.use_cache = !args.flag("--no-cache");
  options.seed = args.integer<std::uint64_t>("--seed", 0);
  const bool json = args.flag("--json");
  const bool chat = args.flag("--chat");
  const std::string chat_template = args.choice("--chat-template", {"auto", "llama3", "chatml"}, "auto");
  const int threads = odc::cli::compute_threads(args);
  if (tokenizer_path.empty()) {
    tokenizer_path = (std::filesystem::path(model_dir) / "tokenizer.json").string();
    if (!std::filesystem::exists(tokenizer_path)) {
      odc::fail("{} has no tokenizer.json: pass --tokenizer PATH, or copy the tokenizer files into it "
                "(odc-ckpt export --tokenizer-from DIR)", model_dir);
    }
  }
  const auto tokenizer = odc::data::Tokenizer::from_file(tokenizer_path);
  odc::train::LoadedModel model(model_dir, threads);
  std::vector<std::int32_t> prompt_ids;
  if (chat) {
    const odc::data::ChatFormatter formatter(
        tokenizer, odc::data::resolve_chat_template(chat_template, tokenizer, tokenizer_path), tokenizer_path);
    prompt_ids = formatter.generation_prompt(prompt);
  } else {
    prompt_ids = tokenizer.encode(prompt, true);
    if (prompt_ids.empty()) {
      // "" with a tokenizer that adds no special tokens: start from the model's BOS, as Hugging
      // Face's generate does without input ids, or say why there is nothing to start from.
      if (!prompt.empty()) odc::fail("--prompt '{}' encodes to no tokens with {}", prompt, tokenizer_path);
      if (!model.bos_token_id()) {
        odc::fail("--prompt is empty and there is no token to start from: {} adds no BOS token and {} names no "
                  "bos_token_id (config.json / generation_config.json); give a prompt",
                  tokenizer_path, model_dir);
      }
      prompt_ids.push_back(*model.bos_token_id());
    }
  }
  const auto result = odc::train::generate(model, prompt_ids, options, [&](const std::vector<std::int32_t>& ids) {
    return tokenizer.decode(ids, true);
  });
  const std::string& text = result.text;
  if (json) {
    const nlohmann::json out = {{"prompt", prompt},
                                {"completion", text},
                                {"prompt_ids", prompt_ids},
                                {"completion_ids", result.ids},
                                {"finish_reason", odc::train::finish_reason_name(result.finish)}};
    std::puts(out.dump().c_str());
  } else {
    std::puts(text.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return odc::cli::run_tool("odc-generate", [&] {
    // Warnings go to stderr (spdlog's default logger writes info lines to stdout, which is the output).
    odc::setup_logging(0, 1, "warn");
    return run(odc::cli::parse(command(), argc, argv));
  });
}
