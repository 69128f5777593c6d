// odc-eval --model DIR --data PATH [options]: loss and perplexity of a Hugging Face checkpoint on
// a dataset, as one JSON line: {"loss": ..., "perplexity": ..., "tokens": ..., "sequences": ...}.
// Exit codes: 0 ok, 1 bad input (odc::Error), 2 usage error.
#include <cstdio>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/command_line.h"
#include "cli/compute_threads.h"
#include "cli/tool_main.h"
#include "odc/core/logging.h"
#include "odc/data/text_dataset.h"
#include "odc/train/rollout/inference.h"

namespace {

constexpr const char* kUsage = R"(usage: odc-eval --model DIR --data PATH [options]

Scores every sequence of PATH with the checkpoint in DIR (config.json + safetensors) and prints
one JSON line: loss (token-weighted mean next-token cross-entropy over the target positions, in
nats), perplexity (exp(loss)), tokens (target positions scored), sequences, over_context (sequences
longer than the model's max_position_embeddings: scored, with a warning on stderr naming the first,
since their positions past it are outside the model's context).

options:
  --model DIR          Hugging Face checkpoint directory (required)
  --data PATH          dataset (required)
  --format F           tokens (pre-tokenized JSONL, default), bin (odc-data convert output), chat
                       ({"messages": [...]}: loss on assistant turns) or text ({"text"} / {"prompt",
                       "completion"}); chat and text are tokenized with the model's tokenizer.json
  --tokenizer PATH     tokenizer.json for chat/text (default: DIR/tokenizer.json)
  --chat-template T    auto (default), llama3 or chatml
  --max-tokens N       tokens per forward batch (>= 1, default 4096)
  --max-sequences N    score only the first N sequences (>= 0; default 0 = all)
  --extra-fields E     error (default) or ignore: a record field its format does not define (as
                       data.extra_fields)
  --threads N          compute threads (default 1; at most 4 x the machine's hardware threads)
  -h, --help           this text
)";

odc::cli::Command command() {
  return {"odc-eval", kUsage,
          {{"--model"}, {"--data"}, {"--format"}, {"--tokenizer"}, {"--chat-template"}, {"--max-tokens"},
           {"--max-sequences"}, {"--extra-fields"}, {"--threads"}}};
}

int run(const odc::cli::Arguments& args) {
  const std::string model_dir = args.required("--model", "DIR");
  const std::string data = args.required("--data", "PATH");
  // Every value is checked here, before the model is read: a bad one is a usage error (exit 2).
  const std::string format = args.choice("--format", {"tokens", "bin", "chat", "text"}, "tokens");
  const auto max_tokens = args.integer("--max-tokens", 4096, odc::Range::at_least(1));
  const auto max_sequences = args.integer("--max-sequences", 0, odc::Range::at_least(0));  // 0 = all
  const bool ignore_extra_fields = args.choice("--extra-fields", {"error", "ignore"}, "error") == "ignore";
  const int threads = odc::cli::compute_threads(args);
  const std::string tokenizer = args.value_or("--tokenizer", "");
  const std::string chat_template = args.choice("--chat-template", {"auto", "llama3", "chatml"}, "auto");
  // Pre-tokenized data is not tokenized: either option would be ignored.
  if (format != "chat" && format != "text" && (args.value("--tokenizer") || args.value("--chat-template"))) {
    throw args.usage_error(fmt::format("--tokenizer and --chat-template apply to --format chat or text only, "
                                       "not {} (pre-tokenized)", format));
  }

  odc::train::LoadedModel model(model_dir, threads);
  std::unique_ptr<odc::data::TokenDataset> dataset;
  try {
    dataset = odc::data::open_dataset(
        data, format, model.config().vocab_size,
        odc::data::TextDataOptions{odc::data::resolve_tokenizer_path(tokenizer, model_dir), chat_template,
                                   ignore_extra_fields});
  } catch (const odc::Error& error) {
    throw odc::Error(odc::data::name_extra_fields_option(error.what(), "--extra-fields ignore"));  // this tool's switch
  }
  const auto result = odc::train::evaluate(model, *dataset, max_tokens, max_sequences);
  const nlohmann::json out = {{"model", model_dir},       {"data", data},
                              {"loss", result.loss},      {"perplexity", result.perplexity},
                              {"tokens", result.tokens},  {"sequences", result.sequences},
                              {"over_context", result.over_context}};
  std::puts(out.dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return odc::cli::run_tool("odc-eval", [&] {
    // Warnings go to stderr (spdlog's default logger writes info lines to stdout, which is the output).
    odc::setup_logging(0, 1, "warn");
    return run(odc::cli::parse(command(), argc, argv));
  });
}
