// Tokenizer on small hand-written tokenizer.json files: merges applied by rank, added tokens and
// their flags, byte fallback, post-processing, decoding, and a clear error for each kind of bad
// input. Equality with the reference library on real files is tests/tokenizer (tokenizer/equality).
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "odc/core/error.h"
#include "odc/data/tokenizer.h"

using nlohmann::json;
using odc::data::Tokenizer;
using Ids = std::vector<std::int32_t>;

namespace {

json added(int id, const std::string& content, bool special = true) {
  return {{"id", id},          {"content", content}, {"single_word", false}, {"lstrip", false},
          {"rstrip", false},   {"normalized", false}, {"special", special}};
}

// Byte-level BPE in the LLaMA-3 layout: Split(regex) + ByteLevel, "Ġ" stands for a space.
json byte_level_json() {
  return json::parse(R"({
    "version": "1.0",
    "added_tokens": [
      {"id": 100, "content": "<|bos|>", "single_word": false, "lstrip": false, "rstrip": false,
       "normalized": false, "special": true},
      {"id": 101, "content": "<|eot|>", "single_word": false, "lstrip": false, "rstrip": false,
       "normalized": false, "special": true}
    ],
    "normalizer": null,
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
      {"type": "Split", "behavior": "Isolated", "invert": false, "pattern": {"Regex":
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
      {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]},
    "post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<|bos|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "pair": [],
      "special_tokens": {"<|bos|>": {"id": "<|bos|>", "ids": [100], "tokens": ["<|bos|>"]}}},
    "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
      "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
      "vocab": {"a": 0, "b": 1, "c": 2, "Ġ": 3, "ab": 4, "bc": 5, "abc": 6, "Ġa": 7, "!": 8,
                "1": 9, "2": 10, "3": 11, "4": 12, "Ċ": 13, "ĠĠ": 14, "'": 15, "s": 16, "'s": 17,
                "Ã": 18, "©": 19, "Ã©": 20, "ð": 21, "Ł": 22, "ĺ": 23, "Ģ": 24, "x": 25, "t": 26},
      "merges": ["b c", "a b", "ab c", "Ġ a", "Ġ Ġ", "' s", "Ã ©"]}
  })");
}

// SentencePiece-style BPE in the LLaMA-2 layout: "▁" for spaces, <0xNN> byte fallback.
json sentencepiece_json() {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) vocab[fmt::format("<0x{:02X}>", b)] = 3 + b;
  int next = 259;
  for (const char* token : {"▁", "h", "i", "▁h", "▁hi", "e", "l", "o", "▁he", "ll", "▁hell", "▁hello"}) {
    vocab[token] = next++;
  }
  return {
      {"version", "1.0"},
      {"added_tokens", {added(0, "<unk>"), added(1, "<s>"), added(2, "</s>")}},
      {"normalizer", json::parse(R"({"type": "Sequence", "normalizers": [
          {"type": "Prepend", "prepend": "▁"},
          {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]})")},
      {"pre_tokenizer", nullptr},
      {"post_processor", json::parse(R"({"type": "TemplateProcessing",
          "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
          "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}})")},
      {"decoder", json::parse(R"({"type": "Sequence", "decoders": [
          {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
          {"type": "ByteFallback"}, {"type": "Fuse"},
          {"type": "Strip", "content": " ", "start": 1, "stop": 0}]})")},
      {"model", {{"type", "BPE"},
                 {"unk_token", "<unk>"},
                 {"fuse_unk", true},
                 {"byte_fallback", true},
                 {"vocab", vocab},
                 {"merges", {"▁ h", "▁h i", "▁h e", "l l", "▁he ll", "▁hell o"}}}},
  };
}

Tokenizer load(const json& document) { return Tokenizer::from_json_text(document.dump(), "test.json"); }

std::int32_t id_of(const Tokenizer& tokenizer, const std::string& token) {
  const auto id = tokenizer.token_to_id(token);
  REQUIRE(id.has_value());
  return *id;
}

}  // namespace

TEST_CASE("tokenizer: merges apply by rank, lowest first", "[tokenizer]") {
  json document = byte_level_json();
  // "b c" (rank 0) beats "a b" (rank 1): abc -> a + bc, and "ab c" never gets a chance.
  CHECK(load(document).encode("abc") == Ids{0, 5});
  // With "a b" first, ab forms, then "ab c" completes the word.
  document["model"]["merges"] = {"a b", "b c", "ab c"};
  CHECK(load(document).encode("abc") == Ids{6});
  // The [left, right] array form of merges means the same.
  document["model"]["merges"] = json::parse(R"([["a", "b"], ["b", "c"], ["ab", "c"]])");
  CHECK(load(document).encode("abc") == Ids{6});
}

TEST_CASE("tokenizer: equal ranks merge leftmost first", "[tokenizer]") {
  json document = byte_level_json();
  document["model"]["merges"] = {"a a"};
  document["model"]["vocab"]["aa"] = 30;
  // "aaa": both pairs have rank 0; the left one merges, leaving "aa" + "a".
  CHECK(load(document).encode("aaa") == Ids{30, 0});
}

TEST_CASE("tokenizer: byte-level pre-tokenization and decoding", "[tokenizer]") {
  const Tokenizer tokenizer = load(byte_level_json());
  // " a" is one pre-token (Ġa); the contraction 's is split off by the regex.
  CHECK(tokenizer.encode("abc a") == Ids{0, 5, 7});
  CHECK(tokenizer.encode("a's") == Ids{0, 17});
  // Numbers split in groups of up to three digits.
  CHECK(tokenizer.encode("1234") == Ids{9, 10, 11, 12});
  // \s+(?!\S) leaves the last space of a run for the next word: "a", "Ġ", "Ġa".
  CHECK(tokenizer.encode("a  a") == Ids{0, 3, 7});
  // Multi-byte UTF-8: é is bytes C3 A9, mapped to "Ã©".
  CHECK(tokenizer.encode("é") == Ids{20});
  for (const std::string text : {"abc a", "a's", "1234", "a  a\n", "é", "!!", "a\n\n a"}) {
    CHECK(tokenizer.decode(tokenizer.encode(text)) == text);
  }
  // A 4-byte emoji decodes back from its byte tokens; a truncated one is U+FFFD.
  const Ids emoji{21, 22, 23, 24};
  CHECK(tokenizer.decode(emoji) == "\xF0\x9F\x98\x80");
  CHECK(tokenizer.decode(Ids{21, 22}) == "\xEF\xBF\xBD");
  CHECK(tokenizer.vocab_size() == 102);
  CHECK(tokenizer.id_to_token(7) == "Ġa");
  CHECK(tokenizer.token_to_id("<|eot|>") == 101);
  CHECK_FALSE(tokenizer.token_to_id("zzz").has_value());
}

TEST_CASE("tokenizer: ignore_merges emits whole vocabulary words", "[tokenizer]") {
  json document = byte_level_json();
  document["model"]["merges"] = {"b c"};
  CHECK(load(document).encode("abc") == Ids{0, 5});
  document["model"]["ignore_merges"] = true;
  CHECK(load(document).encode("abc") == Ids{6});
}

TEST_CASE("tokenizer: special tokens are matched first and never split", "[tokenizer]") {
  const Tokenizer tokenizer = load(byte_level_json());
  CHECK(tokenizer.encode("a<|eot|>abc") == Ids{0, 101, 0, 5});
  CHECK(tokenizer.encode("<|eot|><|eot|>") == Ids{101, 101});
  // A near miss is ordinary text. Only its "t" is in this vocabulary; the other characters are
  // dropped, as the reference does without an unknown token.
  CHECK(tokenizer.encode("<|eot|") == Ids{26});
  // add_special_tokens applies the TemplateProcessing post-processor.
  CHECK(tokenizer.encode("abc", true) == Ids{100, 0, 5});
  CHECK(tokenizer.encode("", true) == Ids{100});
  CHECK(tokenizer.decode(Ids{100, 0, 5, 101}) == "<|bos|>abc<|eot|>");
  CHECK(tokenizer.decode(Ids{100, 0, 5, 101}, true) == "abc");
  CHECK(tokenizer.is_special(101));
  CHECK_FALSE(tokenizer.is_special(5));
}

TEST_CASE("tokenizer: added-token flags", "[tokenizer]") {
  json document = byte_level_json();
  json longer = added(102, "<|eot|>!");
  json stripped = added(103, "<x>");
  stripped["lstrip"] = true;
  stripped["rstrip"] = true;
  json word = added(104, "cat", false);
  word["single_word"] = true;
  document["added_tokens"].push_back(longer);
  document["added_tokens"].push_back(stripped);
  document["added_tokens"].push_back(word);
  const Tokenizer tokenizer = load(document);
  SECTION("longest match wins") { CHECK(tokenizer.encode("<|eot|>!a") == Ids{102, 0}); }
  SECTION("lstrip and rstrip swallow the surrounding whitespace") {
    CHECK(tokenizer.encode("a  <x>  a") == Ids{0, 103, 0});
  }
  SECTION("single_word only matches a whole word") {
    CHECK(tokenizer.encode("a cat!") == Ids{0, 3, 104, 8});
    // Inside a word it is ordinary text: "xcat" -> x + c + a + t via BPE (no cat merges).
    CHECK(tokenizer.encode("xcat") == Ids{25, 2, 0, 26});
  }
}

TEST_CASE("tokenizer: normalized added tokens match after normalization", "[tokenizer]") {
  json document = byte_level_json();
  document["normalizer"] = {{"type", "Lowercase"}};
  json normalized = added(102, "ABC", false);
  normalized["normalized"] = true;
  json raw = added(103, "Abc", false);
  document["added_tokens"].push_back(normalized);
  document["added_tokens"].push_back(raw);
  const Tokenizer tokenizer = load(document);
  // "Abc" matches the raw token before normalization; "ABC"/"aBc" lowercase to "abc", the
  // normalized content of token 102.
  CHECK(tokenizer.encode("Abc") == Ids{103});
  CHECK(tokenizer.encode("aBc") == Ids{102});
  CHECK(tokenizer.encode("ABC a") == Ids{102, 7});
}

TEST_CASE("tokenizer: SentencePiece-style BPE with byte fallback", "[tokenizer]") {
  const Tokenizer tokenizer = load(sentencepiece_json());
  const std::int32_t hi = id_of(tokenizer, "▁hi");
  const std::int32_t hello = id_of(tokenizer, "▁hello");
  const std::int32_t space = id_of(tokenizer, "▁");
  CHECK(tokenizer.encode("hi") == Ids{hi});
  CHECK(tokenizer.encode("hi hello") == Ids{hi, hello});
  CHECK(tokenizer.encode("hi", true) == Ids{1, hi});
  // é is not in the vocabulary: its UTF-8 bytes C3 A9 become <0xC3> <0xA9> (ids 3 + byte).
  CHECK(tokenizer.encode("hi é") == Ids{hi, space, 3 + 0xC3, 3 + 0xA9});
  // Special tokens split the text; each section gets its own "▁" prefix.
  CHECK(tokenizer.encode("hi</s>hi") == Ids{hi, 2, hi});

  CHECK(tokenizer.decode(Ids{hi, hello}) == "hi hello");
  CHECK(tokenizer.decode(Ids{1, hi}) == "<s> hi");
  CHECK(tokenizer.decode(Ids{1, hi}, true) == "hi");
  CHECK(tokenizer.decode(tokenizer.encode("hi é")) == "hi é");
  // Bytes that are not UTF-8 decode to one U+FFFD each.
  CHECK(tokenizer.decode(Ids{hi, 3 + 0xC3}) == "hi\xEF\xBF\xBD");
  // Ids past the vocabulary are skipped, as the reference does.
  CHECK(tokenizer.decode(Ids{hi, 100000}) == "hi");
  CHECK(tokenizer.vocab_size() == 271);
}

TEST_CASE("tokenizer: long SentencePiece sections give the same ids as short ones", "[tokenizer]") {
  const Tokenizer tokenizer = load(sentencepiece_json());
  // Long sections are merged in pieces cut before "▁"; the result must equal word-by-word.
  std::string text;
  Ids expected;
  for (int i = 0; i < 400; ++i) {
    const std::string word = i % 3 == 0 ? "hello" : i % 3 == 1 ? "hi" : "hell";
    text += (i > 0 ? " " : "") + word;
    const Ids piece = tokenizer.encode(word);
    expected.insert(expected.end(), piece.begin(), piece.end());
  }
  CHECK(tokenizer.encode(text) == expected);
}

TEST_CASE("tokenizer: unknown characters without byte fallback fuse into one <unk>", "[tokenizer]") {
  json document = sentencepiece_json();
  document["model"]["byte_fallback"] = false;
  const Tokenizer tokenizer = load(document);
  const std::int32_t hi = id_of(tokenizer, "▁hi");
  const std::int32_t space = id_of(tokenizer, "▁");
  CHECK(tokenizer.encode("hi éé") == Ids{hi, space, 0});
  document["model"]["fuse_unk"] = false;
  CHECK(load(document).encode("hi éé") == Ids{hi, space, 0, 0});
}

TEST_CASE("tokenizer: one tokenizer encodes on several threads", "[tokenizer]") {
  const Tokenizer tokenizer = load(byte_level_json());
  const Ids expected = tokenizer.encode("abc a a's 1234");
  std::vector<std::thread> threads;
  std::vector<int> equal(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) equal[static_cast<std::size_t>(t)] += tokenizer.encode("abc a a's 1234") == expected;
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(equal == std::vector<int>(4, 200));
}

TEST_CASE("tokenizer: bad input is a clear error", "[tokenizer]") {
  const auto error_of = [](const json& document) {
    try {
      load(document);
    } catch (const odc::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  using Catch::Matchers::Contains;

  SECTION("malformed JSON") {
    REQUIRE_THROWS_WITH(Tokenizer::from_json_text("{\"model\": ", "broken.json"),
                        Contains("broken.json") && Contains("malformed tokenizer JSON"));
  }
  SECTION("missing model.vocab") {
    json document = byte_level_json();
    document["model"].erase("vocab");
    CHECK_THAT(error_of(document), Contains("test.json") && Contains("missing field 'model.vocab'"));
  }
  SECTION("merge referencing an unknown token") {
    json document = byte_level_json();
    document["model"]["merges"].push_back("a q");
    CHECK_THAT(error_of(document), Contains("model.merges[7]") && Contains("\"q\"") && Contains("not in model.vocab"));
  }
  SECTION("merge whose result is not in the vocabulary") {
    json document = byte_level_json();
    document["model"]["merges"].push_back("c a");
    CHECK_THAT(error_of(document), Contains("model.merges[7]") && Contains("\"ca\""));
  }
  SECTION("malformed merge") {
    json document = byte_level_json();
    document["model"]["merges"][0] = "abc";
    CHECK_THAT(error_of(document), Contains("model.merges[0]") && Contains("exactly one space"));
  }
  SECTION("unknown pre-tokenizer type") {
    json document = byte_level_json();
    document["pre_tokenizer"]["pretokenizers"][1] = {{"type", "Whitespace"}};
    CHECK_THAT(error_of(document), Contains("pre_tokenizer.pretokenizers[1].type") &&
                                       Contains("unsupported pre_tokenizer type 'Whitespace'"));
  }
  SECTION("unknown normalizer, decoder, post-processor and model types") {
    json document = byte_level_json();
    document["normalizer"] = {{"type", "BertNormalizer"}};
    CHECK_THAT(error_of(document), Contains("normalizer.type") && Contains("'BertNormalizer'"));
    document = byte_level_json();
    document["decoder"] = {{"type", "WordPiece"}};
    CHECK_THAT(error_of(document), Contains("decoder.type") && Contains("'WordPiece'"));
    document = byte_level_json();
    document["post_processor"] = {{"type", "BertProcessing"}};
    CHECK_THAT(error_of(document), Contains("post_processor.type") && Contains("'BertProcessing'"));
    document = byte_level_json();
    document["model"]["type"] = "Unigram";
    CHECK_THAT(error_of(document), Contains("model.type") && Contains("'Unigram'"));
  }
  SECTION("invalid regex") {
    json document = byte_level_json();
    document["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
    CHECK_THAT(error_of(document), Contains("pre_tokenizer.pretokenizers[0].pattern.Regex") && Contains("invalid regex"));
  }
  SECTION("wrongly typed fields") {
    json document = byte_level_json();
    document["model"]["vocab"]["a"] = "zero";
    CHECK_THAT(error_of(document), Contains("model.vocab[\"a\"]") && Contains("expected an integer"));
    document = byte_level_json();
    document["added_tokens"][0]["content"] = 5;
    CHECK_THAT(error_of(document), Contains("added_tokens[0].content") && Contains("expected a string"));
  }
  SECTION("added token contradicting the vocabulary") {
    json document = byte_level_json();
    document["added_tokens"].push_back(added(105, "abc"));
    CHECK_THAT(error_of(document), Contains("added_tokens[2]") && Contains("model.vocab gives it id 6"));
  }
  SECTION("template naming an undefined special token") {
    json document = byte_level_json();
    document["post_processor"]["single"][0]["SpecialToken"]["id"] = "<|nope|>";
    CHECK_THAT(error_of(document), Contains("post_processor.single[0].SpecialToken") && Contains("<|nope|>"));
  }
  SECTION("text that is not UTF-8, ids that name no token, a missing file") {
    const Tokenizer tokenizer = load(byte_level_json());
    REQUIRE_THROWS_WITH(tokenizer.encode("ab\xFF"), Contains("not valid UTF-8") && Contains("byte offset 2"));
    REQUIRE_THROWS_WITH(tokenizer.id_to_token(55), Contains("token id 55 names no token"));
    const std::string missing = (std::filesystem::temp_directory_path() / "odc_no_such_tokenizer.json").string();
    REQUIRE_THROWS_WITH(Tokenizer::from_file(missing), Contains(missing) && Contains("cannot open"));
  }
}
