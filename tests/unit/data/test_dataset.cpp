// JsonlTokenDataset: a good file parses into the right spans and target counts; every kind of bad
// input is an odc::Error naming file:line.
#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "odc/core/error.h"
#include "unit/temp_dir.h"
#include "odc/data/dataset.h"

namespace fs = std::filesystem;
using odc::data::JsonlTokenDataset;

namespace {

// The test's scratch directory.
struct TempDir : odc::test::TempDir {
  TempDir() : odc::test::TempDir("dataset") {}
};

}  // namespace

TEST_CASE("JsonlTokenDataset parses sequences, masks and target counts", "[data]") {
  TempDir dir;
  const std::string path = dir.write("good.jsonl",
                                     "{\"input_ids\": [1, 5, 7, 3]}\n"
                                     "\n"
                                     "   \n"
                                     "{\"input_ids\": [1, 2, 9], \"loss_mask\": [1, 0, 1]}\n"
                                     "{\"loss_mask\": [true, false, true, true, false], "
                                     "\"input_ids\": [0, 31, 30, 29, 28], \"attention_mask\": [1, 1, 1, true, 1]}\r\n"
                                     "{\"input_ids\": [4]}");  // last line without newline
  const JsonlTokenDataset ds(path, 32);

  REQUIRE(ds.size() == 4);
  REQUIRE(ds.length(0) == 4);
  REQUIRE(ds.length(1) == 3);
  REQUIRE(ds.length(2) == 5);
  REQUIRE(ds.length(3) == 1);
  REQUIRE(ds.max_length() == 5);

  const auto s2 = ds.get(2);
  REQUIRE(std::vector<std::int32_t>(s2.tokens.begin(), s2.tokens.end()) ==
          std::vector<std::int32_t>{0, 31, 30, 29, 28});
  REQUIRE(std::vector<std::uint8_t>(s2.target_mask.begin(), s2.target_mask.end()) ==
          std::vector<std::uint8_t>{1, 0, 1, 1, 0});

  // No mask: every position 1..len-1 is a target. Position 0 never counts, even when masked in.
  REQUIRE(ds.target_count(0) == 3);
  REQUIRE(ds.target_count(1) == 1);  // mask [1,0,1]: only position 2
  REQUIRE(ds.target_count(2) == 2);  // mask [1,0,1,1,0]: positions 2, 3
  REQUIRE(ds.target_count(3) == 0);

  const auto s0 = ds.get(0);
  REQUIRE(s0.tokens.size() == 4);
  REQUIRE(s0.tokens[1] == 5);
  REQUIRE(s0.target_mask.size() == 4);
  // Sequences are stored contiguously: consecutive views are adjacent in memory.
  REQUIRE(ds.get(1).tokens.data() == s0.tokens.data() + 4);

  REQUIRE_THAT(ds.describe(), Catch::Contains("good.jsonl") && Catch::Contains("4 sequences"));

  const auto opened = odc::data::open_dataset(path, "tokens", 32);
  REQUIRE(opened->size() == 4);
  REQUIRE(opened->target_count(2) == 2);
}

TEST_CASE("JsonlTokenDataset reads Hugging Face labels as loss_mask", "[data]") {
  TempDir dir;
  // labels[i] != -100 makes token i a target (predicted from position i-1), exactly loss_mask[i] = 1.
  const std::string path = dir.write("labels.jsonl",
                                     "{\"input_ids\": [3, 4, 5, 6, 7], \"labels\": [-100, -100, 5, 6, -100]}\n"
                                     "{\"input_ids\": [9, 8], \"labels\": [9, 8], \"attention_mask\": [1, 1]}\n");
  const JsonlTokenDataset ds(path, 32);
  REQUIRE(ds.size() == 2);
  const auto s0 = ds.get(0);
  REQUIRE(std::vector<std::uint8_t>(s0.target_mask.begin(), s0.target_mask.end()) ==
          std::vector<std::uint8_t>{0, 0, 1, 1, 0});
  REQUIRE(ds.target_count(0) == 2);
  const auto s1 = ds.get(1);
  REQUIRE(std::vector<std::uint8_t>(s1.target_mask.begin(), s1.target_mask.end()) == std::vector<std::uint8_t>{1, 1});
  REQUIRE(ds.target_count(1) == 1);  // position 0 is never a target, as with loss_mask
}

TEST_CASE("JsonlTokenDataset refuses Hugging Face fields it cannot honour, and unknown fields", "[data]") {
  TempDir dir;
  const std::string good = "{\"input_ids\": [1, 2, 3]}\n";
  const auto bad_file = [&](const std::string& name, const std::string& record) {
    return dir.write(name, good + "\n" + record + "\n" + good);
  };
  SECTION("labels other than -100 or the token itself") {
    const auto path = bad_file("labelval.jsonl", "{\"input_ids\": [1, 2, 3], \"labels\": [-100, 3, 3]}");
    REQUIRE_THROWS_WITH(JsonlTokenDataset(path, 32),
                        Catch::Contains(path + ":3:") && Catch::Contains("labels[1] is 3 but input_ids[1] is 2") &&
                            Catch::Contains("must be -100 (ignored) or equal to input_ids"));
    const auto text = bad_file("labeltype.jsonl", "{\"input_ids\": [1, 2], \"labels\": [-100, \"2\"]}");
    REQUIRE_THROWS_WITH(JsonlTokenDataset(text, 32), Catch::Contains(text + ":3:") && Catch::Contains("labels[1] must be -100"));
  }
  SECTION("labels of another length") {
    const auto path = bad_file("labellen.jsonl", "{\"input_ids\": [1, 2, 3], \"labels\": [-100, 2]}");
    REQUIRE_THROWS_WITH(JsonlTokenDataset(path, 32),
                        Catch::Contains(path + ":3:") && Catch::Contains("\"labels\" has 2 entries but \"input_ids\" has 3"));
  }
  SECTION("labels and loss_mask both") {
    const auto path = bad_file("both.jsonl", "{\"input_ids\": [1, 2], \"labels\": [1, 2], \"loss_mask\": [1, 1]}");
    REQUIRE_THROWS_WITH(JsonlTokenDataset(path, 32),
                        Catch::Contains(path + ":3:") && Catch::Contains("both \"loss_mask\" and \"labels\" given"));
  }
  SECTION("attention_mask with padding") {
    const auto path = bad_file("pad.jsonl", "{\"input_ids\": [1, 2, 0], \"attention_mask\": [1, 1, 0]}");
    REQUIRE_THROWS_WITH(JsonlTokenDataset(path, 32),
                        Catch::Contains(path + ":3:") && Catch::Contains("attention_mask[2] is 0") &&
                            Catch::Contains("padded records are not supported"));
  }
  SECTION("unknown field, with the nearest known one") {
    const auto path = bad_file("typo.jsonl", "{\"input_ids\": [1, 2], \"loss_msk\": [0, 1]}");
    REQUIRE_THROWS_WITH(JsonlTokenDataset(path, 32),
                        Catch::Contains(path + ":3:") && Catch::Contains("unknown field \"loss_msk\" in a tokens record") &&
                            Catch::Contains("did you mean \"loss_mask\"?"));
    const auto other = bad_file("other.jsonl", "{\"input_ids\": [1, 2], \"source\": \"web\"}");
    REQUIRE_THROWS_WITH(JsonlTokenDataset(other, 32),
                        Catch::Contains(other + ":3:") && Catch::Contains("unknown field \"source\"") &&
                            !Catch::Contains("did you mean"));
    // data.extra_fields: ignore reads the record without the field.
    const JsonlTokenDataset ignored(other, 32, /*ignore_extra_fields=*/true);
    REQUIRE(ignored.size() == 3);
    REQUIRE(ignored.target_count(1) == 1);
    odc::data::TextDataOptions options;
    options.ignore_extra_fields = true;
    REQUIRE(odc::data::open_dataset(path, "tokens", 32, options)->size() == 3);
  }
}

TEST_CASE("JsonlTokenDataset reports every bad input with file:line", "[data]") {
  TempDir dir;
  const std::string good = "{\"input_ids\": [1, 2, 3]}\n";
  // Each bad record sits on line 3 after a good line and a blank line.
  const auto bad_file = [&](const std::string& name, const std::string& record) {
    return dir.write(name, good + "\n" + record + "\n" + good);
  };

  SECTION("malformed JSON") {
    const auto path = bad_file("malformed.jsonl", "{\"input_ids\": [1, 2,");
    REQUIRE_THROWS_AS(JsonlTokenDataset(path, 32), odc::Error);
    REQUIRE_THROWS_WITH(JsonlTokenDataset(path, 32),
                        Catch::Contains(path + ":3:") && Catch::Contains("malformed JSON"));
  }
  SECTION("not an object") {
    const auto path = bad_file("array.jsonl", "[1, 2, 3]");
    REQUIRE_THROWS_WITH(JsonlTokenDataset(path, 32),
                        Catch::Contains(path + ":3:") && Catch::Contains("object"));
  }
  SECTION("missing input_ids") {
    const auto path = bad_file("missing.jsonl", "{\"tokens\": [1, 2]}");
    REQUIRE_THROWS_WITH(JsonlTokenDataset(path, 32),
                        Catch::Contains(path + ":3:") && Catch::Contains("missing \"input_ids\""));
  }
  SECTION("a record of another format names the data.format that reads it") {
    const auto chat = bad_file("chat.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}");
    REQUIRE_THROWS_WITH(JsonlTokenDataset(chat, 32), Catch::Contains("(a chat record: set data.format: chat)"));
    const auto text = bad_file("text.jsonl", "{\"text\": \"hello\"}");
    REQUIRE_THROWS_WITH(JsonlTokenDataset(text, 32), Catch::Contains("(a text record: set data.format: text)"));
  }
  SECTION("input_ids not an array") {
    const auto path = bad_file("notarray.jsonl", "{\"input_ids\": \"1 2 3\"}");
    REQUIRE_THROWS_WITH(JsonlTokenDataset(path, 32),
                        Catch::Contains(path + ":3:") && Catch::Contains("must be an array"));
  }
  SECTION("non-integer ids") {
    for (const std::string id : {"1.5", "\"7\"", "true", "null", "[1]"}) {
      const auto path = bad_file("nonint.jsonl", "{\"input_ids\": [1, " + id + "]}");
      REQUIRE_THROWS_WITH(JsonlTokenDataset(path, 32),
                          Catch::Contains(path + ":3:") && Catch::Contains("input_ids[1]") &&
                              Catch::Contains("integer"));
    }
  }
  SECTION("id out of range") {
    const auto high = bad_file("high.jsonl", "{\"input_ids\": [1, 70000]}");
    REQUIRE_THROWS_WITH(JsonlTokenDataset(high, 32000),
                        Catch::Contains(high + ":3: token id 70000") &&
                            Catch::Contains("out of range [0, 32000)"));
    const auto at_vocab = bad_file("atvocab.jsonl", "{\"input_ids\": [32]}");
    REQUIRE_THROWS_WITH(JsonlTokenDataset(at_vocab, 32),
                        Catch::Contains(at_vocab + ":3: token id 32"));
    const auto negative = bad_file("negative.jsonl", "{\"input_ids\": [-1]}");
    REQUIRE_THROWS_WITH(JsonlTokenDataset(negative, 32),
                        Catch::Contains(negative + ":3: token id -1"));
    const auto huge = bad_file("huge.jsonl", "{\"input_ids\": [18446744073709551615]}");
    REQUIRE_THROWS_WITH(JsonlTokenDataset(huge, 32),
                        Catch::Contains(huge + ":3: token id 18446744073709551615"));
  }
  SECTION("empty input_ids") {
    const auto path = bad_file("empty.jsonl", "{\"input_ids\": []}");
    REQUIRE_THROWS_WITH(JsonlTokenDataset(path, 32),
                        Catch::Contains(path + ":3:") && Catch::Contains("empty"));
  }
  SECTION("loss_mask length mismatch") {
    const auto path = bad_file("masklen.jsonl", "{\"input_ids\": [1, 2, 3], \"loss_mask\": [1, 0]}");
    REQUIRE_THROWS_WITH(JsonlTokenDataset(path, 32),
                        Catch::Contains(path + ":3:") && Catch::Contains("2 entries") &&
                            Catch::Contains("has 3"));
  }
  SECTION("loss_mask values other than 0/1/true/false") {
    for (const std::string value : {"2", "-1", "0.5", "\"1\"", "null"}) {
      const auto path =
          bad_file("maskval.jsonl", "{\"input_ids\": [1, 2], \"loss_mask\": [0, " + value + "]}");
      REQUIRE_THROWS_WITH(JsonlTokenDataset(path, 32),
                          Catch::Contains(path + ":3:") && Catch::Contains("loss_mask[1]"));
    }
  }
  SECTION("loss_mask not an array") {
    const auto path = bad_file("masktype.jsonl", "{\"input_ids\": [1, 2], \"loss_mask\": 1}");
    REQUIRE_THROWS_WITH(JsonlTokenDataset(path, 32),
                        Catch::Contains(path + ":3:") && Catch::Contains("loss_mask"));
  }
}

TEST_CASE("JsonlTokenDataset rejects missing and empty files and unknown formats", "[data]") {
  TempDir dir;
  const std::string missing = (dir.path() / "does_not_exist.jsonl").string();
  REQUIRE_THROWS_AS(JsonlTokenDataset(missing, 32), odc::Error);
  REQUIRE_THROWS_WITH(JsonlTokenDataset(missing, 32), Catch::Contains(missing));

  const std::string empty = dir.write("empty.jsonl", "\n  \n\n");
  REQUIRE_THROWS_WITH(JsonlTokenDataset(empty, 32),
                      Catch::Contains(empty) && Catch::Contains("no sequences"));

  const std::string good = dir.write("good.jsonl", "{\"input_ids\": [1]}\n");
  REQUIRE_THROWS_WITH(JsonlTokenDataset(good, 0), Catch::Contains("vocab"));
  REQUIRE_THROWS_AS(odc::data::open_dataset(good, "parquet", 32), odc::Error);
  REQUIRE_THROWS_WITH(odc::data::open_dataset(good, "parquet", 32),
                      Catch::Contains("parquet") && Catch::Contains("tokens") &&
                          Catch::Contains(good));
}

// Found by tests/fuzz/fuzz_jsonl: a number too large for a double made nlohmann throw out_of_range
// (not parse_error), which escaped the reader as a non-odc exception.
TEST_CASE("JsonlTokenDataset rejects numbers too large for a double with file:line", "[data]") {
  TempDir dir;
  const std::string good = "{\"input_ids\": [1, 2, 3]}\n";
  for (const std::string record : {"{\"input_ids\": [1e999]}", "{\"input_ids\": [1], \"loss_mask\": [-1e400]}"}) {
    const auto path = dir.write("overflow.jsonl", good + record + "\n");
    REQUIRE_THROWS_AS(JsonlTokenDataset(path, 32), odc::Error);
    REQUIRE_THROWS_WITH(JsonlTokenDataset(path, 32),
                        Catch::Contains(path + ":2:") && Catch::Contains("malformed JSON"));
  }
}

// Found by tests/fuzz/fuzz_jsonl: a deeply nested value in input_ids or loss_mask overflowed the
// stack while the error message dumped it.
TEST_CASE("JsonlTokenDataset errors about deeply nested values do not overflow the stack", "[data]") {
  TempDir dir;
  const std::string good = "{\"input_ids\": [1, 2, 3]}\n";
  constexpr std::size_t kDepth = 1'000'000;
  const std::string nested = std::string(kDepth, '[') + std::string(kDepth, ']');
  const auto ids = dir.write("deep_ids.jsonl", good + "{\"input_ids\": [1, " + nested + "]}\n");
  REQUIRE_THROWS_WITH(JsonlTokenDataset(ids, 32), Catch::Contains(ids + ":2:") &&
                                                      Catch::Contains("input_ids[1] must be an integer token id, found an array"));
  const auto mask = dir.write("deep_mask.jsonl", good + "{\"input_ids\": [1], \"loss_mask\": [{\"a\": " + nested + "}]}\n");
  REQUIRE_THROWS_WITH(JsonlTokenDataset(mask, 32),
                      Catch::Contains(mask + ":2:") && Catch::Contains("loss_mask[0]") && Catch::Contains("found an object"));
}
