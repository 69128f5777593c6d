// Synthetic data: deterministic, lengths in range with the requested log-normal shape, the mask
// on exactly the answer, and answers that are actually correct (decoded and re-computed here).
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <map>
#include <numeric>
#include <string>
#include <unistd.h>
#include <vector>

#include "odc/core/error.h"
#include "odc/data/dataset.h"
#include "odc/data/synth.h"

using odc::data::SynthOptions;
using odc::data::SynthSequence;

namespace {

constexpr std::int32_t kBos = 1, kSep = 2, kEos = 3, kCopy = 4, kReverse = 5, kSort = 6, kAdd = 7;

// Decimal digits most significant first -> their sum, as a digit string without leading zeros.
std::string add_decimal(const std::vector<int>& a, const std::vector<int>& b) {
  std::string out;
  int carry = 0;
  for (std::size_t i = 0; i < std::max(a.size(), b.size()) || carry != 0; ++i) {
    const int da = i < a.size() ? a[a.size() - 1 - i] : 0;
    const int db = i < b.size() ? b[b.size() - 1 - i] : 0;
    const int total = da + db + carry;
    out.insert(out.begin(), static_cast<char>('0' + total % 10));
    carry = total / 10;
  }
  const auto first = out.find_first_not_of('0');
  return first == std::string::npos ? "0" : out.substr(first);
}

std::string strip_zeros(const std::vector<int>& digits) {
  std::string out;
  for (int d : digits) out += static_cast<char>('0' + d);
  const auto first = out.find_first_not_of('0');
  return first == std::string::npos ? "0" : out.substr(first);
}

std::vector<int> to_digits(const std::vector<std::int32_t>& ids, std::size_t begin,
                           std::size_t end) {
  std::vector<int> digits;
  for (std::size_t i = begin; i < end; ++i) {
    REQUIRE(ids[i] >= 8);
    REQUIRE(ids[i] <= 17);
    digits.push_back(ids[i] - 8);
  }
  return digits;
}

// Checks one sequence's frame, mask and answer; returns its task marker.
std::int32_t check_sequence(const SynthSequence& seq, std::int64_t vocab) {
  const auto& ids = seq.input_ids;
  REQUIRE(ids.size() == seq.loss_mask.size());
  REQUIRE(ids.size() >= 8);
  REQUIRE(ids.front() == kBos);
  REQUIRE(ids.back() == kEos);
  for (auto id : ids) {
    REQUIRE(id >= 0);
    REQUIRE(id < vocab);
  }
  const std::int32_t task = ids[1];
  REQUIRE(task >= kCopy);
  REQUIRE(task <= kAdd);

  // Exactly one <sep>; the mask is 0 up to and including it, 1 on the answer and <eos>.
  REQUIRE(std::count(ids.begin(), ids.end(), kSep) == 1);
  const auto sep = static_cast<std::size_t>(std::find(ids.begin(), ids.end(), kSep) - ids.begin());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    INFO("position " << i << " of " << ids.size() << ", <sep> at " << sep);
    REQUIRE(seq.loss_mask[i] == (i > sep ? 1 : 0));
  }
  const std::vector<std::int32_t> prompt(ids.begin() + 2, ids.begin() + static_cast<long>(sep));
  const std::vector<std::int32_t> answer(ids.begin() + static_cast<long>(sep) + 1, ids.end() - 1);
  REQUIRE_FALSE(answer.empty());

  if (task == kAdd) {
    // <bos> <add> a <add> b <sep> s <eos>: the answer has the width of the wider operand or more.
    REQUIRE(std::count(prompt.begin(), prompt.end(), kAdd) == 1);
    const auto plus = static_cast<std::size_t>(std::find(ids.begin() + 2, ids.end(), kAdd) -
                                               ids.begin());
    const auto a = to_digits(ids, 2, plus);
    const auto b = to_digits(ids, plus + 1, sep);
    const auto s = to_digits(ids, sep + 1, ids.size() - 1);
    REQUIRE_FALSE(a.empty());
    REQUIRE_FALSE(b.empty());
    REQUIRE(s.size() >= std::max(a.size(), b.size()));
    REQUIRE(strip_zeros(s) == add_decimal(a, b));
  } else {
    for (auto id : prompt) REQUIRE(id >= 8);
    std::vector<std::int32_t> expected = prompt;
    if (task == kReverse) std::reverse(expected.begin(), expected.end());
    if (task == kSort) std::sort(expected.begin(), expected.end());
    REQUIRE(answer == expected);
  }
  return task;
}

std::vector<std::int64_t> lengths_of(const std::vector<SynthSequence>& seqs) {
  std::vector<std::int64_t> lengths;
  for (const auto& s : seqs) lengths.push_back(static_cast<std::int64_t>(s.input_ids.size()));
  return lengths;
}

}  // namespace

TEST_CASE("synth is deterministic in the seed and prefix-stable", "[data]") {
  SynthOptions o;
  o.num_sequences = 200;
  o.seed = 42;
  const auto first = odc::data::generate_synth(o);
  const auto again = odc::data::generate_synth(o);
  REQUIRE(first.size() == 200);
  for (std::size_t i = 0; i < first.size(); ++i) {
    REQUIRE(first[i].input_ids == again[i].input_ids);
    REQUIRE(first[i].loss_mask == again[i].loss_mask);
  }

  o.seed = 43;
  const auto other = odc::data::generate_synth(o);
  std::size_t differing = 0;
  for (std::size_t i = 0; i < first.size(); ++i) differing += first[i].input_ids != other[i].input_ids;
  REQUIRE(differing > 190);

  // Sequence i does not depend on how many are generated.
  o.seed = 42;
  o.num_sequences = 50;
  const auto prefix = odc::data::generate_synth(o);
  for (std::size_t i = 0; i < prefix.size(); ++i) REQUIRE(prefix[i].input_ids == first[i].input_ids);
}

TEST_CASE("synth sequences are correct, masked on the answer, and within [min, max]", "[data]") {
  SynthOptions o;
  o.num_sequences = 2000;
  o.vocab_size = 40;
  o.min_length = 9;
  o.max_length = 300;
  o.mean_length = 60;
  o.sigma = 1.2;  // wide, so both clip bounds are hit
  o.seed = 7;
  const auto seqs = odc::data::generate_synth(o);
  REQUIRE(seqs.size() == 2000);
  std::map<std::int32_t, int> per_task;
  for (const auto& seq : seqs) {
    const auto length = static_cast<std::int64_t>(seq.input_ids.size());
    REQUIRE(length >= o.min_length);
    REQUIRE(length <= o.max_length);
    ++per_task[check_sequence(seq, o.vocab_size)];
  }
  // All four tasks appear in roughly equal shares.
  REQUIRE(per_task.size() == 4);
  for (const auto& [task, count] : per_task) {
    INFO("task " << task);
    REQUIRE(count > 400);
  }
  const auto lengths = lengths_of(seqs);
  REQUIRE(*std::min_element(lengths.begin(), lengths.end()) <= 10);
  REQUIRE(*std::max_element(lengths.begin(), lengths.end()) >= 299);
}

TEST_CASE("synth honours task subsets and exact lengths", "[data]") {
  SynthOptions o;
  o.num_sequences = 300;
  o.vocab_size = 18;  // the smallest vocabulary: payload symbols are the digits only

  SECTION("min = max, odd, add only: every sequence has exactly that length") {
    o.tasks = {"add"};
    o.min_length = o.max_length = 13;
    for (const auto& seq : odc::data::generate_synth(o)) {
      REQUIRE(seq.input_ids.size() == 13);
      REQUIRE(check_sequence(seq, o.vocab_size) == kAdd);
    }
  }
  SECTION("every length from 8 to 40 is hit exactly by add") {
    o.tasks = {"add"};
    for (std::int64_t length = 8; length <= 40; ++length) {
      o.min_length = o.max_length = length;
      o.num_sequences = 20;
      for (const auto& seq : odc::data::generate_synth(o)) {
        REQUIRE(static_cast<std::int64_t>(seq.input_ids.size()) == length);
        check_sequence(seq, o.vocab_size);
      }
    }
  }
  SECTION("min = max, even, copy/reverse/sort") {
    o.tasks = {"copy", "reverse", "sort"};
    o.min_length = o.max_length = 64;
    std::map<std::int32_t, int> per_task;
    for (const auto& seq : odc::data::generate_synth(o)) {
      REQUIRE(seq.input_ids.size() == 64);
      ++per_task[check_sequence(seq, o.vocab_size)];
    }
    REQUIRE(per_task.size() == 3);
    REQUIRE(per_task.count(kAdd) == 0);
  }
  SECTION("odd bounds stay inside [min, max] for even-length tasks") {
    o.tasks = {"sort"};
    o.min_length = 9;
    o.max_length = 11;
    o.mean_length = 10;
    o.sigma = 2;
    for (const auto& seq : odc::data::generate_synth(o)) {
      REQUIRE(seq.input_ids.size() == 10);
      REQUIRE(check_sequence(seq, o.vocab_size) == kSort);
    }
  }
}

TEST_CASE("synth lengths follow the requested log-normal", "[data]") {
  SynthOptions o;
  o.num_sequences = 20000;
  o.min_length = 8;
  o.max_length = 100000;  // wide: the clip barely touches the distribution
  o.mean_length = 128;
  o.seed = 3;

  SECTION("mean within 3% of the target for sigma 0.5") {
    o.sigma = 0.5;
    const auto lengths = lengths_of(odc::data::generate_synth(o));
    const double mean = std::accumulate(lengths.begin(), lengths.end(), 0.0) /
                        static_cast<double>(lengths.size());
    INFO("mean length " << mean);
    REQUIRE(mean == Approx(128.0).epsilon(0.03));
  }
  SECTION("long tail for sigma 1: p99 / p50 > 3") {
    o.sigma = 1.0;
    auto lengths = lengths_of(odc::data::generate_synth(o));
    std::sort(lengths.begin(), lengths.end());
    const double p50 = static_cast<double>(lengths[lengths.size() / 2]);
    const double p99 = static_cast<double>(lengths[lengths.size() * 99 / 100]);
    INFO("p50 " << p50 << ", p99 " << p99);
    REQUIRE(p99 / p50 > 3.0);
    // The median of a log-normal is exp(mu) = mean * exp(-sigma^2 / 2) = 77.6.
    REQUIRE(p50 == Approx(128.0 * std::exp(-0.5)).epsilon(0.05));
  }
  SECTION("sigma 0 gives the mean (up to even-length rounding)") {
    o.sigma = 0;
    o.num_sequences = 100;
    for (auto length : lengths_of(odc::data::generate_synth(o))) REQUIRE(length == 128);
  }
}

TEST_CASE("synth rejects bad options naming the option", "[data]") {
  const auto rejects = [](SynthOptions o, const std::string& option) {
    INFO("option " << option);
    REQUIRE_THROWS_AS(odc::data::generate_synth(o), odc::Error);
    REQUIRE_THROWS_WITH(odc::data::generate_synth(o), Catch::Contains(option));
  };
  SynthOptions o;
  { auto b = o; b.vocab_size = 17; rejects(b, "vocab_size"); }
  { auto b = o; b.min_length = 7; rejects(b, "min_length"); }
  { auto b = o; b.min_length = 100; b.max_length = 99; rejects(b, "max_length"); }
  { auto b = o; b.mean_length = 0; rejects(b, "mean_length"); }
  { auto b = o; b.mean_length = -5; rejects(b, "mean_length"); }
  { auto b = o; b.sigma = -0.1; rejects(b, "sigma"); }
  { auto b = o; b.num_sequences = 0; rejects(b, "num_sequences"); }
  { auto b = o; b.tasks = {"copy", "multiply"}; rejects(b, "multiply"); }
  { auto b = o; b.tasks = {}; rejects(b, "tasks"); }
  { auto b = o; b.min_length = b.max_length = 9; rejects(b, "odd"); }
}

TEST_CASE("write_synth_jsonl round-trips through JsonlTokenDataset", "[data]") {
  static std::atomic<int> counter{0};
  const auto dir = std::filesystem::temp_directory_path() /
                   ("odc_test_synth_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "synth.jsonl").string();

  SynthOptions o;
  o.num_sequences = 100;
  o.seed = 11;
  odc::data::write_synth_jsonl(o, path);
  const auto expected = odc::data::generate_synth(o);
  const odc::data::JsonlTokenDataset ds(path, o.vocab_size);
  REQUIRE(ds.size() == 100);
  for (std::int64_t i = 0; i < ds.size(); ++i) {
    const auto view = ds.get(i);
    const auto& seq = expected[static_cast<std::size_t>(i)];
    REQUIRE(std::vector<std::int32_t>(view.tokens.begin(), view.tokens.end()) == seq.input_ids);
    REQUIRE(std::vector<std::uint8_t>(view.target_mask.begin(), view.target_mask.end()) ==
            seq.loss_mask);
    // <bos> is never a target, so every mask bit counts.
    REQUIRE(ds.target_count(i) == std::accumulate(seq.loss_mask.begin(), seq.loss_mask.end(), 0));
  }
  REQUIRE_FALSE(std::filesystem::exists(path + ".tmp"));

  // A directory that does not exist yet is created (the README's `--out data/train.jsonl` in a
  // fresh clone); one under a regular file is an error naming the path and the reason.
  const auto nested = dir / "new_dir" / "deeper" / "x.jsonl";
  odc::data::write_synth_jsonl(o, nested.string());
  REQUIRE(odc::data::JsonlTokenDataset(nested.string(), o.vocab_size).size() == 100);
  REQUIRE_THROWS_WITH(odc::data::write_synth_jsonl(o, (dir / "synth.jsonl" / "x.jsonl").string()),
                      Catch::Contains("synth.jsonl/x.jsonl: cannot create its directory"));
  // A count no disk holds is refused before anything is generated or written (it once ran out of
  // memory with std::bad_alloc): 2^32 + 1 sequences of >= 16 tokens are >= 256 GiB.
  SynthOptions huge = o;
  huge.num_sequences = 4294967297LL;
  REQUIRE_THROWS_WITH(odc::data::write_synth_jsonl(huge, (dir / "huge.jsonl").string()),
                      Catch::Contains("4294967297 sequences of at least 16 tokens need at least") &&
                          Catch::Contains("GiB free; lower --num"));
  REQUIRE_FALSE(std::filesystem::exists(dir / "huge.jsonl.tmp"));
  std::filesystem::remove_all(dir);
}
