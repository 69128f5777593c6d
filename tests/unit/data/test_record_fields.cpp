// Unknown top-level fields of chat, prompt/completion and text records are refused with file:line
// (as a tokens record's are), unless data.extra_fields: ignore; a directory given as a dataset is
// named as one. On the byte-level tokenizer of tiny_tokenizer_json.h (ids = UTF-8 bytes).
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "odc/core/error.h"
#include "odc/data/dataset.h"
#include "unit/temp_dir.h"
#include "unit/data/tiny_tokenizer_json.h"

using Catch::Matchers::Contains;
using odc::test::tiny_tokenizer;

TEST_CASE("record fields: chat, prompt/completion and text records refuse unknown fields", "[data][chat]") {
  const odc::test::TempDir dir("record_fields");
  const std::string tokenizer = dir.write("tokenizer.json", tiny_tokenizer(odc::test::kChatml).dump());
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
