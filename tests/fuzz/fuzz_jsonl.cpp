// libFuzzer target: arbitrary bytes as a JSONL dataset of odc-train's data.format tokens, chat or
// text. The readers only take a path, so the bytes are written to a per-process scratch file
// (fuzz_support.h) that every iteration overwrites. The first byte selects the reader; the rest is
// the file:
//   byte0 % 4 == 0  tokens  JsonlTokenDataset, vocab 1000 ({"input_ids": [...], "loss_mask": [...]})
//   byte0 % 4 == 1  chat    TextJsonlDataset with the llama3 template
//   byte0 % 4 == 2  chat    TextJsonlDataset with the chatml template
//   byte0 % 4 == 3  text    TextJsonlDataset without a template ({"text": ...} only)
//   byte0 & 4       a model vocabulary of 256 (tokens: 1000 otherwise; chat/text: the tokenizer's
//                   308 otherwise), so merged and template tokens must be rejected as out of range
// chat/text tokenize with a tiny byte-level BPE built here (token b = byte b, "\n\n" = 256, the
// LLaMA-3 and ChatML special tokens from 300 on), as tests/unit/data/test_chat_format.cpp does.
// Reading must succeed or throw odc::Error; a crash, UB, a leak, a hang or any other exception is a
// finding. A dataset that opens must keep its promises for every sequence (tokens and mask of the
// same length >= 1, ids in [0, vocab), target_count = set mask bits after position 0), and the
// binary writer (odc-data convert) must turn it into a .bin/.idx pair that reads back identically.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz_support.h"
#include "odc/core/error.h"
#include "odc/data/bin_dataset.h"
#include "odc/data/chat_format.h"
#include "odc/data/dataset.h"
#include "odc/data/text_dataset.h"
#include "odc/data/tokenizer.h"

namespace {

using nlohmann::json;

std::string utf8(char32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

odc::data::Tokenizer tiny_tokenizer() {
  json vocab = json::object();
  char32_t shifted = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    vocab[utf8(printable ? static_cast<char32_t>(b) : shifted++)] = b;
  }
  vocab["ĊĊ"] = 256;
  const std::vector<std::string> specials = {"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                                             "<|end_header_id|>", "<|eot_id|>",      "<|im_start|>",
                                             "<|im_end|>",        "<|endoftext|>"};
  json added = json::array();
  for (std::size_t i = 0; i < specials.size(); ++i) {
    added.push_back({{"id", 300 + static_cast<int>(i)}, {"content", specials[i]}, {"special", true},
                     {"normalized", false}});
  }
  const json tokenizer = {
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"behavior", "Isolated"},
           {"invert", false},
           {"pattern",
            {{"Regex",
              R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"Ċ Ċ"}}}},
  };
  return odc::data::Tokenizer::from_json_text(tokenizer.dump(), "<fuzz tokenizer>");
}

struct Formatters {
  odc::data::ChatFormatter llama3;
  odc::data::ChatFormatter chatml;
  odc::data::ChatFormatter plain;
};

const Formatters& formatters() {
  static const Formatters all = [] {
    const odc::data::Tokenizer tokenizer = tiny_tokenizer();
    // No tokenizer path: BOS/EOS come from the families' conventional tokens, all present here.
    return Formatters{odc::data::ChatFormatter(tokenizer, odc::data::ChatTemplate::llama3, ""),
                      odc::data::ChatFormatter(tokenizer, odc::data::ChatTemplate::chatml, ""),
                      odc::data::ChatFormatter(tokenizer, std::nullopt, "")};
  }();
  return all;
}

const odc::fuzz::ScratchDir& scratch() {
  static const odc::fuzz::ScratchDir dir("jsonl");
  return dir;
}

void check_dataset(const odc::data::TokenDataset& dataset, std::int64_t vocab) {
  if (dataset.size() < 1) __builtin_trap();  // an empty dataset must be rejected at open
  std::int64_t longest = 0;
  for (std::int64_t i = 0; i < dataset.size(); ++i) {
    const odc::data::SequenceView seq = dataset.get(i);
    const std::int64_t length = dataset.length(i);
    if (length < 1 || seq.tokens.size() != static_cast<std::size_t>(length) ||
        seq.target_mask.size() != seq.tokens.size()) {
      __builtin_trap();
    }
    for (const std::int32_t id : seq.tokens) {
      if (id < 0 || id >= vocab) __builtin_trap();
    }
    const auto targets = std::count_if(seq.target_mask.begin() + 1, seq.target_mask.end(),
                                       [](std::uint8_t m) { return m != 0; });
    if (targets != dataset.target_count(i)) __builtin_trap();
    longest = std::max(longest, length);
  }
  if (dataset.max_length() != longest) __builtin_trap();
  (void)dataset.describe();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t selector = data[0];
  const std::string path = scratch().write(
      "data.jsonl", std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1));
  const Formatters& all = formatters();
  const bool small_vocab = (selector & 4) != 0;

  std::unique_ptr<odc::data::TokenDataset> dataset;
  std::int64_t vocab = 0;
  try {
    if (selector % 4 == 0) {
      vocab = small_vocab ? 256 : 1000;
      dataset = std::make_unique<odc::data::JsonlTokenDataset>(path, vocab);
    } else {
      const odc::data::ChatFormatter& formatter =
          selector % 4 == 1 ? all.llama3 : selector % 4 == 2 ? all.chatml : all.plain;
      vocab = small_vocab ? 256 : formatter.tokenizer().vocab_size();
      const auto kind = selector % 4 == 3 ? odc::data::TextJsonlDataset::Kind::text
                                          : odc::data::TextJsonlDataset::Kind::chat;
      dataset = std::make_unique<odc::data::TextJsonlDataset>(path, kind, formatter, vocab);
    }
  } catch (const odc::Error& error) {
    odc::fuzz::check_rejection(error);  // rejected input: the expected outcome
    return 0;
  }
  // Accepted: an odc::Error from here on means the reader accepted what it cannot serve.
  try {
    check_dataset(*dataset, vocab);
    odc::fuzz::check_binary_round_trip(*dataset, vocab, scratch().file("converted"));
  } catch (const odc::Error&) {
    __builtin_trap();
  }
  return 0;
}
