// tokenizer_difference: two tokenizer.json files that give the same ids to the same text agree
// (whatever else differs: the decoder, the file's formatting), and the first difference of two that
// do not is named: a vocabulary entry, a merge rule, an added token, a pre-tokenizer.
#include <catch2/catch.hpp>

#include <string>

#include "odc/core/error.h"
#include "odc/data/tokenizer.h"
#include "unit/data/tiny_tokenizer_json.h"
#include "unit/temp_dir.h"

using odc::data::tokenizer_difference;

TEST_CASE("tokenizer_difference names the first difference of two tokenizers", "[data][tokenizer]") {
  const odc::test::TempDir dir("tokenizer_compare");
  const auto base = odc::test::tiny_tokenizer(odc::test::kChatml);
  const std::string a = dir.write("a.json", base.dump());
  auto same = base;
  same["decoder"] = nullptr;  // decoding aside, the same ids for the same text
  CHECK_FALSE(tokenizer_difference(a, dir.write("same.json", same.dump(2))).has_value());

  auto swapped = base;  // the same size, two ids swapped
  swapped["model"]["vocab"]["a"] = 98;
  swapped["model"]["vocab"]["b"] = 97;
  CHECK(tokenizer_difference(a, dir.write("swapped.json", swapped.dump())) ==
        "the vocabulary: \"a\" is id 97 in the first, 98 in the second");
  auto merges = base;
  merges["model"]["merges"] = {"a b"};
  CHECK(tokenizer_difference(a, dir.write("merges.json", merges.dump())) ==
        "merge rule 0: \"Ċ Ċ\" in the first, \"a b\" in the second");
  auto added = base;
  added["added_tokens"][1]["content"] = "<|eot_id|>";
  CHECK(tokenizer_difference(a, dir.write("added.json", added.dump())).value().starts_with("added token 1:"));
  auto split = base;
  split["pre_tokenizer"] = nullptr;
  CHECK(tokenizer_difference(a, dir.write("split.json", split.dump())).value().starts_with("the pre_tokenizer:"));
  CHECK_THROWS_WITH(tokenizer_difference(a, dir.write("bad.json", "{")), Catch::Contains("bad.json: not valid JSON"));
}
