// Chat SFT data: exact ids and target masks of the LLaMA-3 and ChatML templates, prompt/completion
// and text records, template auto-detection, and file:line errors for bad records — on a tiny
// byte-level tokenizer whose ids are the UTF-8 bytes themselves (plus "\n\n" = 256).
#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

#include <nlohmann/json.hpp>

#include "odc/core/error.h"
#include "unit/temp_dir.h"
#include "unit/data/tiny_tokenizer_json.h"
#include "odc/data/chat_format.h"
#include "odc/data/dataset.h"
#include "odc/data/length_limit.h"
#include "odc/data/text_dataset.h"

namespace fs = std::filesystem;
using nlohmann::json;
using odc::data::ChatFormatter;
using odc::data::ChatTemplate;
using odc::data::Tokenizer;
using Ids = std::vector<std::int32_t>;
using Mask = std::vector<std::uint8_t>;
using odc::test::kChatml;
using odc::test::kLlama3;
using odc::test::tiny_tokenizer;

namespace {

// The test's scratch directory.
struct TempDir : odc::test::TempDir {
  TempDir() : odc::test::TempDir("chat") {}
};

Tokenizer tokenizer_of(const std::vector<std::string>& specials) {
  return Tokenizer::from_json_text(tiny_tokenizer(specials).dump(), "tiny.json");
}

Ids bytes(const std::string& text) {
  Ids ids;
  for (const char c : text) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

// Appends ids with one mask value, so expectations read like the template.
struct Expected {
  Ids tokens;
  Mask mask;
  Expected& add(const Ids& ids, bool target) {
    tokens.insert(tokens.end(), ids.begin(), ids.end());
    mask.insert(mask.end(), ids.size(), target ? 1 : 0);
    return *this;
  }
};

}  // namespace

TEST_CASE("chat format: LLaMA-3 template ids and assistant-only mask", "[chat]") {
  const ChatFormatter formatter(tokenizer_of(kLlama3), ChatTemplate::llama3, "");
  const json record = json::parse(R"({"messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "  Yo!\n"}]})");
  const auto sample = formatter.format_record(record, "data.jsonl:1");
  // 300 <|begin_of_text|>, 302 <|start_header_id|>, 303 <|end_header_id|>, 304 <|eot_id|>;
  // "\n\n" is 256; the assistant content is trimmed as the official template does.
  Expected expected;
  expected.add({300}, false)
      .add({302}, false).add(bytes("system"), false).add({303, 256}, false).add(bytes("Be brief."), false).add({304}, false)
      .add({302}, false).add(bytes("user"), false).add({303, 256}, false).add(bytes("Hi"), false).add({304}, false)
      .add({302}, false).add(bytes("assistant"), false).add({303, 256}, false).add(bytes("Yo!"), true).add({304}, true);
  CHECK(sample.tokens == expected.tokens);
  CHECK(sample.target_mask == expected.mask);
}

TEST_CASE("chat format: ChatML template ids and multi-turn mask", "[chat]") {
  const ChatFormatter formatter(tokenizer_of(kChatml), ChatTemplate::chatml, "");
  const json record = json::parse(R"({"messages": [
      {"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "Yo"},
      {"role": "user", "content": "2+2?"},
      {"role": "assistant", "content": "4"}]})");
  const auto sample = formatter.format_record(record, "data.jsonl:1");
  // 300 <|im_start|>, 301 <|im_end|>; "\n" is byte 10. No BOS in ChatML.
  Expected expected;
  expected.add({300}, false).add(bytes("user\n"), false).add(bytes("Hi"), false).add({301}, false).add({10}, false)
      .add({300}, false).add(bytes("assistant\n"), false).add(bytes("Yo"), true).add({301}, true).add({10}, false)
      .add({300}, false).add(bytes("user\n"), false).add(bytes("2+2?"), false).add({301}, false).add({10}, false)
      .add({300}, false).add(bytes("assistant\n"), false).add(bytes("4"), true).add({301}, true).add({10}, false);
  CHECK(sample.tokens == expected.tokens);
  CHECK(sample.target_mask == expected.mask);
}

TEST_CASE("chat format: message weight 0 masks a turn out, weight 1 trains on any role", "[chat]") {
  const ChatFormatter formatter(tokenizer_of(kChatml), ChatTemplate::chatml, "");
  const json record = json::parse(R"({"messages": [
      {"role": "user", "content": "Hi", "weight": 1},
      {"role": "assistant", "content": "Yo", "weight": 0},
      {"role": "user", "content": "2+2?", "weight": false},
      {"role": "assistant", "content": "4", "weight": true}]})");
  const auto sample = formatter.format_record(record, "data.jsonl:1");
  Expected expected;
  expected.add({300}, false).add(bytes("user\n"), false).add(bytes("Hi"), true).add({301}, true).add({10}, false)
      .add({300}, false).add(bytes("assistant\n"), false).add(bytes("Yo"), false).add({301}, false).add({10}, false)
      .add({300}, false).add(bytes("user\n"), false).add(bytes("2+2?"), false).add({301}, false).add({10}, false)
      .add({300}, false).add(bytes("assistant\n"), false).add(bytes("4"), true).add({301}, true).add({10}, false);
  CHECK(sample.tokens == expected.tokens);
  CHECK(sample.target_mask == expected.mask);
}

TEST_CASE("chat format: prompt/completion and text records", "[chat]") {
  SECTION("LLaMA-3 defaults: <|begin_of_text|> ... <|end_of_text|>") {
    const ChatFormatter formatter(tokenizer_of(kLlama3), ChatTemplate::llama3, "");
    const auto pc = formatter.format_record(json{{"prompt", "Q: 1+1="}, {"completion", "2"}}, "x:1");
    Expected expected;
    expected.add({300}, false).add(bytes("Q: 1+1="), false).add(bytes("2"), true).add({301}, true);
    CHECK(pc.tokens == expected.tokens);
    CHECK(pc.target_mask == expected.mask);
    const auto text = formatter.format_record(json{{"text", "ab"}}, "x:2");
    CHECK(text.tokens == Ids{300, 'a', 'b', 301});
    CHECK(text.target_mask == Mask{1, 1, 1, 1});
  }
  SECTION("ChatML defaults: no BOS, <|endoftext|>") {
    const ChatFormatter formatter(tokenizer_of(kChatml), ChatTemplate::chatml, "");
    const auto text = formatter.format_text_record(json{{"text", "ab\n\n"}}, "x:1");
    CHECK(text.tokens == Ids{'a', 'b', 256, 302});
  }
  SECTION("tokenizer_config.json decides BOS/EOS when present") {
    TempDir dir;
    const std::string path = dir.write("tokenizer.json", tiny_tokenizer(kChatml).dump());
    dir.write("tokenizer_config.json", R"({"bos_token": null, "eos_token": {"content": "<|im_end|>"}, "add_bos_token": false})");
    const ChatFormatter formatter(Tokenizer::from_file(path), std::nullopt, path);
    CHECK_FALSE(formatter.bos().has_value());
    CHECK(formatter.eos() == 301);
    const auto pc = formatter.format_record(json{{"prompt", "a"}, {"completion", "b"}}, "x:1");
    CHECK(pc.tokens == Ids{'a', 'b', 301});
    CHECK(pc.target_mask == Mask{0, 1, 1});
  }
}

TEST_CASE("chat format: auto picks the template family", "[chat]") {
  TempDir dir;
  const Tokenizer llama3 = tokenizer_of(kLlama3);
  const Tokenizer chatml = tokenizer_of(kChatml);
  CHECK(odc::data::resolve_chat_template("auto", llama3, "") == ChatTemplate::llama3);
  CHECK(odc::data::resolve_chat_template("auto", chatml, "") == ChatTemplate::chatml);
  CHECK(odc::data::resolve_chat_template("chatml", llama3, "") == ChatTemplate::chatml);
  // tokenizer_config.json's chat_template wins over the special tokens.
  std::vector<std::string> both = kLlama3;
  both.insert(both.end(), kChatml.begin(), kChatml.end());
  const std::string path = dir.write("tokenizer.json", tiny_tokenizer(both).dump());
  dir.write("tokenizer_config.json", R"({"chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}"})");
  CHECK(odc::data::resolve_chat_template("auto", Tokenizer::from_file(path), path) == ChatTemplate::chatml);

  using Catch::Matchers::Contains;
  const Tokenizer plain = tokenizer_of({"<s>", "</s>"});
  REQUIRE_THROWS_WITH(odc::data::resolve_chat_template("auto", plain, ""),
                      Contains("cannot pick a chat template") && Contains("tiny.json"));
  REQUIRE_THROWS_WITH(odc::data::resolve_chat_template("vicuna", plain, ""), Contains("'vicuna'"));
  REQUIRE_THROWS_WITH(ChatFormatter(plain, ChatTemplate::llama3, ""), Contains("<|begin_of_text|>"));
}

TEST_CASE("chat format: bad records are errors naming file:line", "[chat]") {
  const ChatFormatter formatter(tokenizer_of(kLlama3), ChatTemplate::llama3, "");
  using Catch::Matchers::Contains;
  const auto error_of = [&](const std::string& line) {
    try {
      formatter.format_record(json::parse(line), "data.jsonl:7");
    } catch (const odc::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(error_of(R"({"messages": [{"role": "user", "content": "a"}, {"role": "tool", "content": "b"}]})"),
             Contains("data.jsonl:7: messages[1]") && Contains("unknown role \"tool\""));
  CHECK_THAT(error_of(R"({"messages": [{"role": "user"}]})"),
             Contains("data.jsonl:7: messages[0]") && Contains("missing \"content\""));
  CHECK_THAT(error_of(R"({"messages": [{"role": "assistant", "content": 42}]})"),
             Contains("data.jsonl:7: messages[0]") && Contains("\"content\" must be a string"));
  CHECK_THAT(error_of(R"({"messages": [{"role": "user", "content": "hi"}]})"),
             Contains("data.jsonl:7") && Contains("no assistant message"));
  CHECK_THAT(error_of(R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "weight": 0}]})"),
             Contains("data.jsonl:7") && Contains("no assistant message with a weight other than 0"));
  CHECK_THAT(error_of(R"({"messages": [{"role": "assistant", "content": "b", "weight": 0.5}]})"),
             Contains("data.jsonl:7: messages[0]") && Contains("\"weight\" must be 0, 1, true or false, found 0.5"));
  CHECK_THAT(error_of(R"({"messages": [{"role": "assistant", "content": "b", "wieght": 0}]})"),
             Contains("data.jsonl:7: messages[0]") && Contains("unknown field \"wieght\" in a message") &&
                 Contains("did you mean \"weight\"?") &&
                 Contains("so they are refused even where unknown record fields are ignored"));
  CHECK_THAT(error_of(R"({"messages": []})"), Contains("data.jsonl:7") && Contains("non-empty array"));
  CHECK_THAT(error_of(R"({"prompt": "a"})"), Contains("data.jsonl:7") && Contains("missing \"completion\""));
  CHECK_THAT(error_of(R"({"input": "a"})"), Contains("data.jsonl:7") && Contains("\"messages\""));
  CHECK_THAT(error_of(R"([1, 2])"), Contains("data.jsonl:7") && Contains("expected a JSON object"));
  REQUIRE_THROWS_WITH(formatter.format_text_record(json::parse(R"({"messages": []})"), "data.jsonl:8"),
                      Contains("data.jsonl:8") && Contains("missing \"text\"") &&
                          Contains("(a chat record: set data.format: chat)"));
  // A record of another format names the data.format that reads it.
  CHECK_THAT(error_of(R"({"input_ids": [1, 2]})"), Contains("(a pre-tokenized record: set data.format: tokens)"));
  REQUIRE_THROWS_WITH(formatter.format_text_record(json::parse(R"({"input_ids": [1]})"), "data.jsonl:9"),
                      Contains("(a pre-tokenized record: set data.format: tokens)"));
}

TEST_CASE("chat format: open_dataset tokenizes chat and text JSONL", "[chat]") {
  TempDir dir;
  const std::string tokenizer = dir.write("tokenizer.json", tiny_tokenizer(kChatml).dump());
  const odc::data::TextDataOptions options{tokenizer, "auto"};
  const std::string chat = dir.write("chat.jsonl",
                                     "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, "
                                     "{\"role\": \"assistant\", \"content\": \"Yo\"}]}\n\n"
                                     "{\"prompt\": \"a\", \"completion\": \"bc\"}\n");
  const auto dataset = odc::data::open_dataset(chat, "chat", 400, options);
  REQUIRE(dataset->size() == 2);
  CHECK(dataset->length(0) == 25);  // 1 + "user\n" + "Hi" + 2, then 1 + "assistant\n" + "Yo" + 2
  CHECK(dataset->target_count(0) == 3);  // "Yo" + <|im_end|>
  const auto second = dataset->get(1);
  CHECK(Ids(second.tokens.begin(), second.tokens.end()) == Ids{'a', 'b', 'c', 302});
  CHECK(Mask(second.target_mask.begin(), second.target_mask.end()) == Mask{0, 1, 1, 1});
  CHECK_THAT(dataset->describe(), Catch::Contains("chat JSONL") && Catch::Contains("2 sequences"));

  const std::string text = dir.write("text.jsonl", "{\"text\": \"hello\"}\n{\"text\": \"x\"}\n");
  CHECK(odc::data::open_dataset(text, "text", 400, options)->size() == 2);

  using Catch::Matchers::Contains;
  // The tokenizer's ids must fit the model: <|endoftext|> = 302 is outside a 300-token model.
  REQUIRE_THROWS_WITH(odc::data::open_dataset(text, "text", 300, options),
                      Contains(text + ":1") && Contains("outside the model's vocabulary"));
  const std::string bad = dir.write("bad.jsonl", "{\"text\": \"ok\"}\n{\"text\": \n");
  REQUIRE_THROWS_WITH(odc::data::open_dataset(bad, "text", 400, options), Contains(bad + ":2") && Contains("malformed JSON"));
  const std::string wrong_kind = dir.write("wrong.jsonl", "{\"prompt\": \"a\", \"completion\": \"b\"}\n");
  REQUIRE_THROWS_WITH(odc::data::open_dataset(wrong_kind, "text", 400, options),
                      Contains(wrong_kind + ":1") && Contains("missing \"text\""));
  REQUIRE_THROWS_WITH(odc::data::open_dataset(chat, "chat", 400, {}), Contains("needs a tokenizer"));
  CHECK(odc::data::resolve_tokenizer_path("", "/ckpt") == "/ckpt/tokenizer.json");
  CHECK(odc::data::resolve_tokenizer_path("/t/tok.json", "/ckpt") == "/t/tok.json");
}

// Found by tests/fuzz/fuzz_jsonl: nlohmann reports a number too large for a double as out_of_range,
// not parse_error, and it escaped the chat/text reader as a non-odc exception.
TEST_CASE("chat format: a number overflow in a record is malformed JSON naming file:line", "[chat]") {
  TempDir dir;
  const std::string tokenizer = dir.write("tokenizer.json", tiny_tokenizer(kChatml).dump());
  const odc::data::TextDataOptions options{tokenizer, "auto"};
  const std::string text = dir.write("big.jsonl", "{\"text\": \"ok\"}\n{\"text\": \"x\", \"weight\": 1e999}\n");
  for (const std::string format : {"text", "chat"}) {
    REQUIRE_THROWS_AS(odc::data::open_dataset(text, format, 400, options), odc::Error);
    REQUIRE_THROWS_WITH(odc::data::open_dataset(text, format, 400, options),
                        Catch::Contains(text + ":2") && Catch::Contains("malformed JSON"));
  }
}

// data.max_length over tokenized text: the records keep their file:line (blank lines counted), a
// truncated conversation can lose its assistant turn (counted), and text records are limited alike.
TEST_CASE("chat format: data.max_length truncates, drops or names chat and text records", "[chat][length]") {
  using odc::data::limit_lengths;
  using odc::data::OverLength;
  TempDir dir;
  const std::string tokenizer = dir.write("tokenizer.json", tiny_tokenizer(kChatml).dump());
  const odc::data::TextDataOptions options{tokenizer, "auto"};
  const std::string chat = dir.write("chat.jsonl",
                                     "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, "
                                     "{\"role\": \"assistant\", \"content\": \"Yo\"}]}\n\n"
                                     "{\"prompt\": \"a\", \"completion\": \"bc\"}\n");
  // Lengths 25 (line 1) and 4 (line 3).
  REQUIRE_THROWS_WITH(limit_lengths(odc::data::open_dataset(chat, "chat", 400, options), {10, OverLength::error}),
                      Catch::Contains(chat + ":1: the sequence has 25 tokens, more than data.max_length = 10"));
  odc::data::LengthLimitReport report;
  const auto cut = limit_lengths(odc::data::open_dataset(chat, "chat", 400, options), {10, OverLength::truncate}, &report);
  REQUIRE(cut->size() == 2);
  CHECK(cut->length(0) == 10);
  CHECK(cut->target_count(0) == 0);  // the assistant's "Yo" + <|im_end|> came after token 10
  CHECK(report.lost_targets == 1);
  CHECK(cut->target_count(1) == 3);
  const auto kept = limit_lengths(odc::data::open_dataset(chat, "chat", 400, options), {10, OverLength::drop});
  REQUIRE(kept->size() == 1);
  CHECK(kept->length(0) == 4);
  CHECK(kept->record(0) == chat + ":3");

  const std::string text = dir.write("text.jsonl", "{\"text\": \"x\"}\n{\"text\": \"hello\"}\n");
  const auto one = odc::data::open_dataset(text, "text", 400, options);
  const std::int64_t longer = one->length(1);
  REQUIRE(longer > one->length(0));
  REQUIRE_THROWS_WITH(limit_lengths(odc::data::open_dataset(text, "text", 400, options), {longer - 1, OverLength::error}),
                      Catch::Contains(text + ":2: the sequence has " + std::to_string(longer) + " tokens"));
  CHECK(limit_lengths(odc::data::open_dataset(text, "text", 400, options), {longer - 1, OverLength::drop})->size() == 1);
}
