// odc-data: dataset utilities. `synth` writes a synthetic pre-tokenized JSONL dataset, `convert`
// turns pre-tokenized, chat or text JSONL into the binary format; each prints a one-line JSON
// summary.
// Exit codes: 0 ok, 1 bad input (odc::Error), 2 usage error.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "odc/core/error.h"
#include "odc/data/bin_dataset.h"
#include "odc/data/dataset.h"
#include "odc/data/synth.h"
#include "odc/data/tokenizer.h"

namespace {

constexpr int kExitError = 1;
constexpr int kExitUsage = 2;

// A command-line mistake: reported with the usage hint and exit code 2, unlike bad data (1).
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

constexpr const char* kMainUsage = R"(usage: odc-data <command> [options]

commands:
  synth     write a synthetic pre-tokenized JSONL dataset (copy/reverse/sort/add tasks)
  convert   convert pre-tokenized, chat or text JSONL into the binary format (data.format: bin)

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
spans, checksum), checks that it opens, and prints a one-line JSON summary. Train on it with
data.format: bin and data.train: PREFIX.

Input formats (--format):
  tokens   pre-tokenized: {"input_ids": [...], "loss_mask": [...]} per line (default)
  chat     {"messages": [{"role": "system"|"user"|"assistant", "content": "..."}, ...]},
           {"prompt": "...", "completion": "..."} or {"text": "..."} per line, tokenized with
           --tokenizer and rendered with --chat-template; targets: assistant turns (content and
           end-of-turn token), completion + EOS, or all of the text
  text     {"text": "..."} per line; targets: all tokens

options:
  --in FILE            JSONL input (required)
  --out PREFIX         output prefix; a trailing .bin or .idx is ignored (required)
  --format F           tokens, chat or text (default tokens)
  --tokenizer PATH     Hugging Face tokenizer.json (required for chat and text); BOS/EOS come from
                       tokenizer_config.json next to it when present
  --chat-template T    auto, llama3 or chatml (default auto: from tokenizer_config.json's
                       chat_template, else from the tokenizer's special tokens)
  --vocab V            reject token ids >= V (default: the tokenizer's vocabulary for chat/text,
                       else any id that fits int32; the trainer checks the model's vocabulary
                       when it opens the data)
  -h, --help           show this help
)";

template <typename T>
T parse_integer(std::string_view command, std::string_view flag, const std::string& text) {
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) {
    throw UsageError("odc-data " + std::string(command) + ": " + std::string(flag) +
                     " expects an integer, got '" + text + "'");
  }
  return value;
}

double parse_double(std::string_view command, std::string_view flag, const std::string& text) {
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) {
    throw UsageError("odc-data " + std::string(command) + ": " + std::string(flag) +
                     " expects a number, got '" + text + "'");
  }
  return value;
}

// Splits a command's arguments into (flag, value) pairs, accepting both "--flag value" and
// "--flag=value"; returns nullopt when help was asked for.
std::optional<std::vector<std::pair<std::string, std::string>>> parse_options(
    std::string_view command, const std::vector<std::string>& args,
    const std::vector<std::string>& known) {
  std::vector<std::pair<std::string, std::string>> options;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i];
    if (flag == "-h" || flag == "--help") return std::nullopt;
    std::string value;
    bool has_value = false;
    if (const auto eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      has_value = true;
    }
    if (std::find(known.begin(), known.end(), flag) == known.end()) {
      throw UsageError("odc-data " + std::string(command) + ": unknown option '" + flag + "'");
    }
    if (!has_value) {
      if (i + 1 >= args.size()) {
        throw UsageError("odc-data " + std::string(command) + ": " + flag + " needs a value");
      }
      value = args[++i];
    }
    options.emplace_back(std::move(flag), std::move(value));
  }
  return options;
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = text.find(',', start);
    parts.push_back(text.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return parts;
}

// Nearest-rank percentile of sorted values.
std::int64_t percentile(const std::vector<std::int64_t>& sorted, double p) {
  const auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  return sorted[std::clamp<std::size_t>(rank, 1, sorted.size()) - 1];
}

int run_synth(const std::vector<std::string>& args) {
  const auto parsed = parse_options(
      "synth", args,
      {"--out", "--num", "--vocab", "--min-length", "--max-length", "--mean-length", "--sigma",
       "--tasks", "--seed"});
  if (!parsed) {
    std::cout << kSynthUsage;
    return 0;
  }
  odc::data::SynthOptions options;
  std::string out_path;
  for (const auto& [flag, value] : *parsed) {
    if (flag == "--out") {
      out_path = value;
    } else if (flag == "--num") {
      options.num_sequences = parse_integer<std::int64_t>("synth", flag, value);
    } else if (flag == "--vocab") {
      options.vocab_size = parse_integer<std::int64_t>("synth", flag, value);
    } else if (flag == "--min-length") {
      options.min_length = parse_integer<std::int64_t>("synth", flag, value);
    } else if (flag == "--max-length") {
      options.max_length = parse_integer<std::int64_t>("synth", flag, value);
    } else if (flag == "--mean-length") {
      options.mean_length = parse_double("synth", flag, value);
    } else if (flag == "--sigma") {
      options.sigma = parse_double("synth", flag, value);
    } else if (flag == "--tasks") {
      options.tasks = split_commas(value);
    } else {
      options.seed = parse_integer<std::uint64_t>("synth", flag, value);
    }
  }
  if (out_path.empty()) throw UsageError("odc-data synth: --out PATH is required");

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

int run_convert(const std::vector<std::string>& args) {
  const auto parsed = parse_options("convert", args,
                                    {"--in", "--out", "--vocab", "--format", "--tokenizer", "--chat-template"});
  if (!parsed) {
    std::cout << kConvertUsage;
    return 0;
  }
  std::string in_path;
  std::string out_prefix;
  std::string format = "tokens";
  odc::data::TextDataOptions text_options;
  std::optional<std::int64_t> vocab_option;
  for (const auto& [flag, value] : *parsed) {
    if (flag == "--in") {
      in_path = value;
    } else if (flag == "--out") {
      out_prefix = odc::data::bin_dataset_prefix(value);
    } else if (flag == "--format") {
      format = value;
    } else if (flag == "--tokenizer") {
      text_options.tokenizer_path = value;
    } else if (flag == "--chat-template") {
      text_options.chat_template = value;
    } else {
      vocab_option = parse_integer<std::int64_t>("convert", flag, value);
    }
  }
  if (in_path.empty()) throw UsageError("odc-data convert: --in FILE.jsonl is required");
  if (out_prefix.empty()) throw UsageError("odc-data convert: --out PREFIX is required");
  const bool text_format = format == "chat" || format == "text";
  if (!text_format && format != "tokens") {
    throw UsageError("odc-data convert: --format must be tokens, chat or text, got '" + format + "'");
  }
  if (text_format && text_options.tokenizer_path.empty()) {
    throw UsageError("odc-data convert: --format " + format + " needs --tokenizer PATH (a tokenizer.json)");
  }
  if (!text_format && (!text_options.tokenizer_path.empty() || text_options.chat_template != "auto")) {
    throw UsageError("odc-data convert: --tokenizer and --chat-template apply to --format chat or text only");
  }
  std::int64_t vocab_size = std::numeric_limits<std::int32_t>::max();
  if (vocab_option) {
    vocab_size = *vocab_option;
  } else if (text_format) {
    vocab_size = odc::data::Tokenizer::from_file(text_options.tokenizer_path).vocab_size();
  }

  const auto start = std::chrono::steady_clock::now();
  {
    const auto source = odc::data::open_dataset(in_path, format, vocab_size, text_options);
    odc::data::write_bin_dataset(out_prefix, *source);
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

int run(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::cerr << kMainUsage;
    return kExitUsage;
  }
  const std::string& command = args[0];
  if (command == "-h" || command == "--help" || command == "help") {
    std::cout << kMainUsage;
    return 0;
  }
  if (command == "synth") return run_synth({args.begin() + 1, args.end()});
  if (command == "convert") return run_convert({args.begin() + 1, args.end()});
  throw UsageError("odc-data: unknown command '" + command + "'");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const UsageError& e) {
    std::cerr << e.what() << "\n(run 'odc-data --help' for usage)\n";
    return kExitUsage;
  } catch (const odc::Error& e) {
    std::cerr << "odc-data: error: " << e.what() << '\n';
    return kExitError;
  } catch (const std::exception& e) {
    std::cerr << "odc-data: unexpected error: " << e.what() << '\n';
    return kExitError;
  }
}
