// odc-data: dataset utilities. `synth` writes a synthetic pre-tokenized JSONL dataset, `convert`
// turns pre-tokenized, chat or text JSONL into the binary format; each prints a one-line JSON
// summary.
// Exit codes: 0 ok, 1 bad input (odc::Error), 2 usage error.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/command_line.h"
#include "cli/tool_main.h"
#include "odc/core/error.h"
#include "odc/data/bin_dataset.h"
#include "odc/data/bin_dataset_writer.h"
#include "odc/data/dataset.h"
#include "odc/data/synth.h"
#include "odc/data/tokenizer.h"

namespace {

constexpr const char* kMainUsage = R"(usage: odc-data <command> [options]

commands:
  synth     write a synthetic pre-tokenized JSONL dataset (copy/reverse/sort/add tasks)
  convert   convert pre-tokenized, chat or text JSONL into the binary format (data.format: bin),
            or rewrite a binary pair (an old version 1 one gets its payload checksums)

Run 'odc-data <command> --help' for the options of a command.
)";

constexpr const char* kSynthUsage = R"(usage: odc-data synth --out PATH [options]

Writes PATH as pre-tokenized JSONL ({"input_ids": [...], "loss_mask": [...]} per line, format
"tokens") and prints a one-line JSON summary. Lengths are log-normal, clipped to [min, max].

options:
  --out PATH           output file (required)
  --num N              number of sequences (default 1000)
  --vocab V            vocabulary size, >= 18 (default 64)
  --min-length A       shortest sequence, >= 8 (default 16)
  --max-length B       longest sequence (default 512)
  --mean-length M      mean of the unclipped log-normal length (default 128)
  --sigma S            log-space standard deviation (default 1.0)
  --tasks LIST         comma-separated subset of copy,reverse,sort,add (default all)
  --seed K             random seed (default 0)
  -h, --help           show this help
)";

constexpr const char* kConvertUsage = R"(usage: odc-data convert --in FILE.jsonl --out PREFIX [options]

Reads JSONL, writes the binary pair PREFIX.bin (uint32 token ids) + PREFIX.idx (offsets, target
spans, checksums of the index and of every MiB of PREFIX.bin), checks that it opens, and prints a
one-line JSON summary. Train on it with data.format: bin and data.train: PREFIX. PREFIX's
directory is created if missing.

Input formats (--format):
  tokens   pre-tokenized: {"input_ids": [...], "loss_mask": [...]} per line (default)
  chat     {"messages": [{"role": "system"|"user"|"assistant", "content": "..."}, ...]},
           {"prompt": "...", "completion": "..."} or {"text": "..."} per line, tokenized with
           --tokenizer and rendered with --chat-template; targets: assistant turns (content and
           end-of-turn token), completion + EOS, or all of the text
  text     {"text": "..."} per line; targets: all tokens
  bin      a binary pair (--in PREFIX): rewritten as the current format version (a version 1
           pair, which has no checksums of its .bin, gets them; --out may equal --in)

options:
  --in FILE            JSONL input (required)
  --out PREFIX         output prefix; a trailing .bin or .idx is ignored (required)
  --format F           tokens, chat, text or bin (default tokens)
  --extra-fields E     error or ignore (default error): a record field its format does not define
                       (tokens: input_ids, loss_mask, labels, attention_mask; chat: messages, or
                       prompt + completion, or text; text: text), as odc-train's data.extra_fields
  --tokenizer PATH     Hugging Face tokenizer.json (required for chat and text); BOS/EOS come from
                       tokenizer_config.json next to it when present
  --chat-template T    auto, llama3 or chatml (default auto: from tokenizer_config.json's
                       chat_template, else from the tokenizer's special tokens)
  --vocab V            reject token ids >= V (default: the tokenizer's vocabulary for chat/text,
                       else any id that fits int32; the trainer checks the model's vocabulary
                       when it opens the data)
  -h, --help           show this help
)";

// Nearest-rank percentile of sorted values.
std::int64_t percentile(const std::vector<std::int64_t>& sorted, double p) {
  const auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  return sorted[std::clamp<std::size_t>(rank, 1, sorted.size()) - 1];
}

int run_synth(const odc::cli::Arguments& args) {
  odc::data::SynthOptions options;
  const std::string out_path = args.required("--out", "PATH");
  options.num_sequences = args.integer("--num", options.num_sequences);
  options.vocab_size = args.integer("--vocab", options.vocab_size);
  options.min_length = args.integer("--min-length", options.min_length);
  options.max_length = args.integer("--max-length", options.max_length);
  options.mean_length = args.number("--mean-length", options.mean_length);
  options.sigma = args.number("--sigma", options.sigma);
  options.tasks = args.list("--tasks", options.tasks);
  options.seed = args.integer("--seed", options.seed);

  odc::data::write_synth_jsonl(options, out_path);

  // The summary is computed from the file as the trainer will read it, which also proves that it
  // loads.
  const odc::data::JsonlTokenDataset dataset(out_path, options.vocab_size);
  std::vector<std::int64_t> lengths;
  std::int64_t tokens = 0;
  std::int64_t targets = 0;
  for (std::int64_t i = 0; i < dataset.size(); ++i) {
    lengths.push_back(dataset.length(i));
    tokens += dataset.length(i);
    targets += dataset.target_count(i);
  }
  std::sort(lengths.begin(), lengths.end());
  const nlohmann::ordered_json summary = {
      {"out", out_path},
      {"count", dataset.size()},
      {"tokens", tokens},
      {"target_tokens", targets},
      {"mean_length", static_cast<double>(tokens) / static_cast<double>(dataset.size())},
      {"min_length", lengths.front()},
      {"max_length", lengths.back()},
      {"p50", percentile(lengths, 50)},
      {"p90", percentile(lengths, 90)},
      {"p99", percentile(lengths, 99)},
      {"seed", options.seed},
  };
  std::cout << summary.dump() << '\n';
  return 0;
}

std::uint64_t file_size_or_zero(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  return ec ? 0 : static_cast<std::uint64_t>(size);
}

int run_convert(const odc::cli::Arguments& args) {
  const std::string in_path = args.required("--in", "FILE.jsonl");
  // A trailing .bin or .idx is dropped, so "--out .bin" names no prefix either.
  const std::string out_prefix = odc::data::bin_dataset_prefix(args.value_or("--out", ""));
  if (out_prefix.empty()) throw args.usage_error("--out PREFIX is required");
  const std::string format = args.choice("--format", {"tokens", "chat", "text", "bin"}, "tokens");
  odc::data::TextDataOptions text_options;
  // What odc-train's data.extra_fields does, so a file the trainer reads converts too.
  text_options.ignore_extra_fields = args.choice("--extra-fields", {"error", "ignore"}, "error") == "ignore";
  text_options.tokenizer_path = args.value_or("--tokenizer", "");
  text_options.chat_template = args.value_or("--chat-template", text_options.chat_template);
  const std::optional<std::int64_t> vocab_option = args.optional_integer("--vocab");
  const bool text_format = format == "chat" || format == "text";
  if (text_format && text_options.tokenizer_path.empty()) {
    throw args.usage_error("--format " + format + " needs --tokenizer PATH (a tokenizer.json)");
  }
  if (!text_format && (!text_options.tokenizer_path.empty() || text_options.chat_template != "auto")) {
    throw args.usage_error("--tokenizer and --chat-template apply to --format chat or text only");
  }
  if (format == "bin" && args.value("--extra-fields")) {
    throw args.usage_error("--extra-fields applies to JSONL input (--format tokens, chat or text), not --format bin");
  }
  std::int64_t vocab_size = std::numeric_limits<std::int32_t>::max();
  if (vocab_option) {
    vocab_size = *vocab_option;
  } else if (text_format) {
    vocab_size = odc::data::Tokenizer::from_file(text_options.tokenizer_path).vocab_size();
  }

  const auto start = std::chrono::steady_clock::now();
  try {
    const auto source = odc::data::open_dataset(in_path, format, vocab_size, text_options);
    odc::data::write_bin_dataset(out_prefix, *source);
  } catch (const odc::Error& error) {
    // The dataset's message names the trainer's key; here the same switch is an option.
    throw odc::Error(odc::data::name_extra_fields_option(error.what(), "--extra-fields ignore"));
  }
  // The summary is computed from the written pair as the trainer will read it, which also proves
  // that it opens and validates.
  const odc::data::BinTokenDataset written(out_prefix, vocab_size);
  std::int64_t targets = 0;
  for (std::int64_t i = 0; i < written.size(); ++i) targets += written.target_count(i);
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;

  const nlohmann::ordered_json summary = {
      {"in", in_path},
      {"format", format},
      {"out", out_prefix},
      {"sequences", written.size()},
      {"tokens", written.total_tokens()},
      {"target_tokens", targets},
      {"bytes", file_size_or_zero(out_prefix + ".bin") + file_size_or_zero(out_prefix + ".idx")},
      {"seconds", elapsed.count()},
  };
  std::cout << summary.dump() << '\n';
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using odc::cli::Command;
  const std::vector<odc::cli::Subcommand> subcommands = {
      {"synth",
       Command{"", kSynthUsage,
               {{"--out"}, {"--num"}, {"--vocab"}, {"--min-length"}, {"--max-length"}, {"--mean-length"}, {"--sigma"},
                {"--tasks"}, {"--seed"}}},
       run_synth},
      {"convert", Command{"", kConvertUsage, {{"--in"}, {"--out"}, {"--vocab"}, {"--format"}, {"--tokenizer"},
                                               {"--chat-template"}, {"--extra-fields"}}},
       run_convert},
  };
  return odc::cli::run_tool("odc-data", [&] { return odc::cli::run_subcommand("odc-data", kMainUsage, subcommands, argc, argv); });
}
