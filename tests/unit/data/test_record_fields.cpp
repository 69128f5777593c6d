// Unknown top-level fields of chat, prompt/completion and text records are refused with file:line
// (as a tokens record's are), unless data.extra_fields: ignore; a directory given as a dataset is
// named as one. On the byte-level tokenizer of test_chat_format.cpp (ids = UTF-8 bytes).
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "odc/core/error.h"
#include "odc/data/dataset.h"
#include "unit/temp_dir.h"

using nlohmann::json;
using Catch::Matchers::Contains;

namespace {

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

// Byte-level BPE whose token for byte b has id b (GPT-2's byte-to-unicode alphabet), one merge
// ("\n\n" -> 256), and the given special tokens from id 300 on.
json tiny_tokenizer(const std::vector<std::string>& specials) {
  json vocab = json::object();
  char32_t shifted = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    vocab[utf8(printable ? static_cast<char32_t>(b) : shifted++)] = b;
  }
  vocab["ĊĊ"] = 256;
  json added = json::array();
  for (std::size_t i = 0; i < specials.size(); ++i) {
    added.push_back({{"id", 300 + static_cast<int>(i)}, {"content", specials[i]}, {"special", true},
                     {"normalized", false}});
  }
  return {
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
}

const std::vector<std::string> kLlama3 = {"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                                          "<|end_header_id|>", "<|eot_id|>"};
const std::vector<std::string> kChatml = {"<|im_start|>", "<|im_end|>", "<|endoftext|>"};

}  // namespace

TEST_CASE("record fields: chat, prompt/completion and text records refuse unknown fields", "[data][chat]") {
  const odc::test::TempDir dir("record_fields");
  const std::string tokenizer = dir.write("tokenizer.json", tiny_tokenizer({"<|im_start|>", "<|im_end|>", "<|endoftext|>"}).dump());
  odc::data::TextDataOptions options{tokenizer, "auto"};
  const std::string chat = dir.write("chat.jsonl",
                                     "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, "
                                     "{\"role\": \"assistant\", \"content\": \"Yo\"}]}\n"
                                     "{\"messages\": [{\"role\": \"assistant\", \"content\": \"Yo\"}], \"id\": 3}\n");
  REQUIRE_THROWS_WITH(odc::data::open_dataset(chat, "chat", 400, options),
                      Contains(chat + ":2: unknown field \"id\" in a chat record") &&
                          Contains("data.extra_fields: ignore skips unknown fields"));
  const std::string mixed = dir.write("mixed.jsonl", "{\"messages\": [{\"role\": \"assistant\", \"content\": \"a\"}], \"text\": \"b\"}\n");
  REQUIRE_THROWS_WITH(odc::data::open_dataset(mixed, "chat", 400, options),
                      Contains(mixed + ":1: unknown field \"text\" in a chat record"));
  const std::string typo = dir.write("typo.jsonl", "{\"promt\": \"a\", \"completion\": \"b\"}\n");
  REQUIRE_THROWS_WITH(odc::data::open_dataset(typo, "chat", 400, options),
                      Contains(typo + ":1: unknown field \"promt\" in a prompt/completion record; did you mean \"prompt\"?"));
  const std::string text = dir.write("text.jsonl", "{\"text\": \"a\"}\n{\"text\": \"b\", \"meta\": {}}\n");
  REQUIRE_THROWS_WITH(odc::data::open_dataset(text, "text", 400, options),
                      Contains(text + ":2: unknown field \"meta\" in a text record"));
  REQUIRE_THROWS_WITH(odc::data::open_dataset(text, "chat", 400, options),
                      Contains(text + ":2: unknown field \"meta\" in a text record"));

  // data.extra_fields: ignore reads them as if the field were not there.
  options.ignore_extra_fields = true;
  CHECK(odc::data::open_dataset(chat, "chat", 400, options)->size() == 2);
  CHECK(odc::data::open_dataset(text, "text", 400, options)->size() == 2);
  CHECK(odc::data::open_dataset(text, "text", 400, options)->length(1) == 2);  // "b" + <|endoftext|>
}

TEST_CASE("record fields: a directory given as a dataset is named as one, for every format", "[data]") {
  const odc::test::TempDir dir("dataset_dir");
  dir.write("train.jsonl", "{\"input_ids\": [1]}\n");
  const std::string path = dir.path().string();
  for (const std::string format : {"tokens", "bin", "chat", "text"}) {
    REQUIRE_THROWS_WITH(odc::data::open_dataset(path, format, 400, {"tokenizer.json", "auto"}),
                        Contains(path + ": is a directory, not a dataset file (data.format '" + format + "' reads") &&
                            Contains("it holds train.jsonl"));
  }
}
