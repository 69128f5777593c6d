// data.max_length over the datasets: error names the record (file:line or bin index), the index and
// the length; truncate cuts tokens and masks and recounts targets; drop leaves sequences out and
// keeps every other one's record. The chat and text formats are covered in test_chat_format.cpp.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include "odc/core/error.h"
#include "odc/data/bin_dataset_writer.h"
#include "odc/data/dataset.h"
#include "odc/data/length_limit.h"
#include "unit/temp_dir.h"

using namespace odc::data;
using Catch::Matchers::Contains;

namespace {

using Ids = std::vector<std::int32_t>;
using Mask = std::vector<std::uint8_t>;

struct TempDir : odc::test::TempDir {
  TempDir() : odc::test::TempDir("length_limit") {}
};

// Lengths 3, 6, 4, 8 on lines 1, 3, 4, 6 (blank lines between, so the line is not index + 1).
const char* kJsonl =
    "{\"input_ids\": [1, 2, 3]}\n"
    "\n"
    "{\"input_ids\": [1, 2, 3, 4, 5, 6], \"loss_mask\": [0, 0, 0, 0, 1, 1]}\n"
    "{\"input_ids\": [7, 8, 9, 10]}\n"
    "\n"
    "{\"input_ids\": [1, 2, 3, 4, 5, 6, 7, 8], \"loss_mask\": [0, 1, 1, 0, 0, 0, 1, 1]}\n";

Ids tokens_of(const TokenDataset& d, std::int64_t i) {
  const auto s = d.get(i);
  return Ids(s.tokens.begin(), s.tokens.end());
}
Mask mask_of(const TokenDataset& d, std::int64_t i) {
  const auto s = d.get(i);
  return Mask(s.target_mask.begin(), s.target_mask.end());
}

}  // namespace

TEST_CASE("length limit: records name file:line for JSONL and the index for bin", "[data][length]") {
  TempDir dir;
  const auto jsonl = open_dataset(dir.write("d.jsonl", kJsonl), "tokens", 32);
  CHECK(jsonl->record(0) == dir.file("d.jsonl") + ":1");
  CHECK(jsonl->record(3) == dir.file("d.jsonl") + ":6");
  write_bin_dataset(dir.file("d"), *jsonl);
  const auto bin = open_dataset(dir.file("d"), "bin", 32);
  CHECK(bin->record(3) == dir.file("d") + ".idx: sequence 3");
}

TEST_CASE("length limit: error names the first longer sequence's record, index and length", "[data][length]") {
  TempDir dir;
  const std::string path = dir.write("d.jsonl", kJsonl);
  REQUIRE_THROWS_WITH(limit_lengths(open_dataset(path, "tokens", 32), {5, OverLength::error}),
                      Contains(path + ":3: the sequence has 6 tokens, more than data.max_length = 5") &&
                          Contains("record 1 of the dataset") && Contains("2 of its 4 sequences are longer") &&
                          Contains("data.over_length: truncate"));
  write_bin_dataset(dir.file("d"), *open_dataset(path, "tokens", 32));
  REQUIRE_THROWS_WITH(limit_lengths(open_dataset(dir.file("d"), "bin", 32), {7, OverLength::error}),
                      Contains(dir.file("d") + ".idx: sequence 3: the sequence has 8 tokens") &&
                          Contains("data.max_length = 7") && Contains("1 of its 4 sequences"));
}

TEST_CASE("length limit: nothing over the limit (or no limit) returns the dataset itself", "[data][length]") {
  TempDir dir;
  const std::string path = dir.write("d.jsonl", kJsonl);
  for (const OverLength policy : {OverLength::error, OverLength::truncate, OverLength::drop}) {
    auto dataset = open_dataset(path, "tokens", 32);
    const TokenDataset* before = dataset.get();
    LengthLimitReport report;
    const auto limited = limit_lengths(std::move(dataset), {8, policy}, &report);
    CHECK(limited.get() == before);
    CHECK(report.over == 0);
    CHECK(report.sequences_before == 4);
    CHECK(limit_lengths(open_dataset(path, "tokens", 32), {0, policy})->size() == 4);
  }
}

TEST_CASE("length limit: truncate keeps the first max_length tokens and their mask", "[data][length]") {
  TempDir dir;
  const std::string path = dir.write("d.jsonl", kJsonl);
  auto check = [](const TokenDataset& d) {
    REQUIRE(d.size() == 4);
    CHECK(d.length(0) == 3);
    CHECK(d.length(1) == 5);
    CHECK(d.length(3) == 5);
    CHECK(d.max_length() == 5);
    CHECK(tokens_of(d, 1) == Ids{1, 2, 3, 4, 5});
    CHECK(mask_of(d, 1) == Mask{0, 0, 0, 0, 1});
    CHECK(d.target_count(1) == 1);  // position 5 was a target and is gone
    CHECK(tokens_of(d, 3) == Ids{1, 2, 3, 4, 5});
    CHECK(mask_of(d, 3) == Mask{0, 1, 1, 0, 0});
    CHECK(d.target_count(3) == 2);
    CHECK(d.target_count(2) == 3);  // untouched: every position after the first
    CHECK(tokens_of(d, 2) == Ids{7, 8, 9, 10});
  };
  LengthLimitReport report;
  const auto jsonl = limit_lengths(open_dataset(path, "tokens", 32), {5, OverLength::truncate}, &report);
  check(*jsonl);
  CHECK(report.over == 2);
  CHECK(report.longest == 8);
  CHECK(report.lost_targets == 0);
  CHECK_THAT(jsonl->describe(), Contains("2 sequences truncated to data.max_length = 5"));
  CHECK(jsonl->record(3) == path + ":6");
  write_bin_dataset(dir.file("d"), *open_dataset(path, "tokens", 32));
  check(*limit_lengths(open_dataset(dir.file("d"), "bin", 32), {5, OverLength::truncate}));

  // A cut that leaves a sequence no target is counted (it then adds nothing to the loss).
  const auto lost = limit_lengths(open_dataset(path, "tokens", 32), {2, OverLength::truncate}, &report);
  CHECK(report.over == 4);
  CHECK(report.lost_targets == 1);  // sequence 1: its targets were at positions 4 and 5
  CHECK(lost->target_count(1) == 0);
  CHECK(lost->target_count(3) == 1);
}

TEST_CASE("length limit: drop leaves the longer sequences out, keeping order and records", "[data][length]") {
  TempDir dir;
  const std::string path = dir.write("d.jsonl", kJsonl);
  auto check = [](const TokenDataset& d) {
    REQUIRE(d.size() == 2);
    CHECK(tokens_of(d, 0) == Ids{1, 2, 3});
    CHECK(tokens_of(d, 1) == Ids{7, 8, 9, 10});
    CHECK(d.target_count(1) == 3);
    CHECK(d.max_length() == 4);
  };
  LengthLimitReport report;
  const auto jsonl = limit_lengths(open_dataset(path, "tokens", 32), {5, OverLength::drop}, &report);
  check(*jsonl);
  CHECK(report.over == 2);
  CHECK(report.longest == 8);
  CHECK(jsonl->record(1) == path + ":4");
  CHECK_THAT(jsonl->describe(), Contains("2 sequences after dropping 2 longer than data.max_length = 5"));
  write_bin_dataset(dir.file("d"), *open_dataset(path, "tokens", 32));
  const auto bin = limit_lengths(open_dataset(dir.file("d"), "bin", 32), {5, OverLength::drop});
  check(*bin);
  CHECK(bin->record(1) == dir.file("d") + ".idx: sequence 2");
  REQUIRE_THROWS_WITH(limit_lengths(open_dataset(path, "tokens", 32), {2, OverLength::drop}),
                      Contains("every one of its 4 sequences is longer than data.max_length = 2"));
}

TEST_CASE("length limit: policy names", "[data][length]") {
  CHECK(parse_over_length("drop") == OverLength::drop);
  CHECK(over_length_name(OverLength::truncate) == "truncate");
  REQUIRE_THROWS_WITH(parse_over_length("cut"), Contains("data.over_length must be one of error, truncate, drop"));
}
