// BinTokenDataset: JSONL -> bin round trips exactly (tokens, masks, target counts); every kind of
// corruption is an odc::Error naming the file and the problem. Also: a restored Sampler continues
// exactly like an uninterrupted one (the resumable half of the data pipeline).
#include <catch2/catch.hpp>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <unistd.h>
#include <vector>

#include "odc/core/error.h"
#include "unit/temp_dir.h"
#include "odc/core/hash.h"
#include "odc/data/bin_dataset.h"
#include "odc/data/bin_dataset_writer.h"
#include "odc/data/dataset.h"
#include "odc/data/packing.h"
#include "odc/data/synth.h"

namespace fs = std::filesystem;
using odc::data::BinTokenDataset;
using odc::data::JsonlTokenDataset;
using odc::data::Sampler;
using odc::data::SamplerState;
using odc::data::TokenDataset;

namespace {

// The test's scratch directory.
struct TempDir : odc::test::TempDir {
  TempDir() : odc::test::TempDir("bin_dataset") {}
};

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

template <typename T>
T get_field(const std::vector<char>& bytes, std::size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

template <typename T>
void set_field(std::vector<char>& bytes, std::size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof(T));
}

// Independent implementation of the format's checksum (bin_dataset.h): FNV-1a over the first 40
// header bytes and everything after the 48-byte header. Corrupting a structural field and then
// re-sealing the index lets the test reach the structural checks behind the checksum.
void reseal(std::vector<char>& idx) {
  odc::Fnv1a hash;
  hash.add(idx.data(), 40);
  hash.add(idx.data() + 48, idx.size() - 48);
  set_field<std::uint64_t>(idx, 40, hash.value());
}

// Version 2: the last 8 bytes of a small pair's index are the one payload checksum (one chunk);
// recomputed over a changed .bin, then the index resealed.
void reseal_payload(std::vector<char>& idx, const std::vector<char>& bin) {
  const auto sum = odc::data::bin_payload_checksum(
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(bin.data()), bin.size()));
  set_field<std::uint64_t>(idx, idx.size() - 8, sum);
  reseal(idx);
}

void require_same(const TokenDataset& a, const TokenDataset& b) {
  REQUIRE(a.size() == b.size());
  for (std::int64_t i = 0; i < a.size(); ++i) {
    INFO("sequence " << i);
    const auto x = a.get(i);
    const auto y = b.get(i);
    REQUIRE(std::vector<std::int32_t>(x.tokens.begin(), x.tokens.end()) ==
            std::vector<std::int32_t>(y.tokens.begin(), y.tokens.end()));
    REQUIRE(std::vector<std::uint8_t>(x.target_mask.begin(), x.target_mask.end()) ==
            std::vector<std::uint8_t>(y.target_mask.begin(), y.target_mask.end()));
    REQUIRE(a.length(i) == b.length(i));
    REQUIRE(a.target_count(i) == b.target_count(i));
  }
}

// Sequence lengths 6, 3, 1, 1, 5, 8, 2: spans of sequence 0 are (1,2) and (4,1).
const std::string kJsonl =
    "{\"input_ids\": [1, 5, 7, 3, 9, 2], \"loss_mask\": [0, 1, 1, 0, 1, 0]}\n"  // several spans
    "{\"input_ids\": [4, 4, 4], \"loss_mask\": [0, 0, 0]}\n"                     // all zero
    "{\"input_ids\": [8]}\n"                                                     // length 1, target
    "{\"input_ids\": [0], \"loss_mask\": [0]}\n"                                 // length 1, none
    "{\"input_ids\": [31, 30, 29, 28, 27]}\n"                                    // all targets
    "{\"input_ids\": [1, 2, 3, 4, 5, 6, 7, 8], \"loss_mask\": [1, 0, 1, 0, 1, 1, 0, 1]}\n"
    "{\"input_ids\": [6, 6], \"loss_mask\": [1, 0]}\n";
constexpr std::int64_t kCount = 7;
constexpr std::size_t kOffsets = 56;                            // token offsets[count+1]
constexpr std::size_t kSpanOffsets = kOffsets + 8 * (kCount + 1);
constexpr std::size_t kSpans = kSpanOffsets + 8 * (kCount + 1);  // (start, length) uint32 pairs

}  // namespace

TEST_CASE("BinTokenDataset round-trips JSONL exactly", "[data]") {
  TempDir dir;
  const std::string jsonl = dir.write("small.jsonl", kJsonl);
  const JsonlTokenDataset source(jsonl, 32);
  const std::string prefix = dir.file("small");
  odc::data::write_bin_dataset(prefix, source);
  REQUIRE(fs::exists(prefix + ".bin"));
  REQUIRE(fs::exists(prefix + ".idx"));
  REQUIRE_FALSE(fs::exists(prefix + ".bin.tmp"));
  REQUIRE_FALSE(fs::exists(prefix + ".idx.tmp"));
  REQUIRE(fs::file_size(prefix + ".bin") == 4 * 26);

  const BinTokenDataset bin(prefix, 32);
  require_same(source, bin);
  REQUIRE(bin.total_tokens() == 26);
  REQUIRE(bin.target_count(0) == 3);
  REQUIRE(bin.target_count(1) == 0);
  REQUIRE(bin.target_count(2) == 0);  // position 0 is never a target
  REQUIRE(bin.target_count(5) == 4);
  REQUIRE(bin.max_length() == 8);
  REQUIRE_THAT(bin.describe(), Catch::Contains("small.bin") && Catch::Contains("7 sequences"));

  // Tokens are views into one mapping: consecutive sequences are adjacent, and nothing is copied
  // per call.
  REQUIRE(bin.get(1).tokens.data() == bin.get(0).tokens.data() + 6);
  REQUIRE(bin.get(4).tokens.data() == bin.get(4).tokens.data());

  // "x", "x.bin" and "x.idx" all name the same pair, directly and through open_dataset.
  for (const std::string& path : {prefix, prefix + ".bin", prefix + ".idx"}) {
    const auto opened = odc::data::open_dataset(path, "bin", 32);
    require_same(source, *opened);
  }
  REQUIRE_THROWS_WITH(odc::data::open_dataset(prefix, "parquet", 32),
                      Catch::Contains("tokens") && Catch::Contains("bin"));

  // Rewriting over an existing pair replaces it.
  const std::string other_jsonl = dir.write("other.jsonl", "{\"input_ids\": [3, 2, 1]}\n");
  const JsonlTokenDataset other(other_jsonl, 32);
  odc::data::write_bin_dataset(prefix, other);
  require_same(other, BinTokenDataset(prefix, 32));
}

TEST_CASE("BinTokenDataset round-trips a synthetic dataset", "[data]") {
  TempDir dir;
  odc::data::SynthOptions options;
  options.num_sequences = 300;
  options.max_length = 200;
  options.mean_length = 40;
  options.seed = 11;
  const std::string jsonl = dir.file("synth.jsonl");
  odc::data::write_synth_jsonl(options, jsonl);
  const JsonlTokenDataset source(jsonl, options.vocab_size);
  odc::data::write_bin_dataset(dir.file("synth"), source);
  require_same(source, BinTokenDataset(dir.file("synth"), options.vocab_size));
}

namespace {

// Serves the first `good` sequences of `inner`, then fails: a conversion dying half-way.
class FailingDataset final : public TokenDataset {
 public:
  FailingDataset(const TokenDataset& inner, std::int64_t good) : inner_(inner), good_(good) {}
  std::int64_t size() const override { return inner_.size(); }
  odc::data::SequenceView get(std::int64_t index) const override {
    if (index >= good_) odc::fail("simulated read failure at sequence {}", index);
    return inner_.get(index);
  }
  std::int64_t length(std::int64_t index) const override { return inner_.length(index); }
  std::int64_t target_count(std::int64_t index) const override {
    return inner_.target_count(index);
  }
  std::string describe() const override { return "failing"; }

 private:
  const TokenDataset& inner_;
  std::int64_t good_;
};

}  // namespace

TEST_CASE("write_bin_dataset leaves nothing behind on failure", "[data]") {
  TempDir dir;
  const JsonlTokenDataset source(dir.write("small.jsonl", kJsonl), 32);
  // A missing directory is created (as odc-data synth does); one under a regular file is an error.
  const std::string missing_dir = dir.file("no/such/dir/x");
  odc::data::write_bin_dataset(missing_dir, source);
  require_same(source, BinTokenDataset(missing_dir, 32));
  const std::string under_file = dir.write("plain", "x") + "/x";
  REQUIRE_THROWS_WITH(odc::data::write_bin_dataset(under_file, source),
                      Catch::Contains(under_file + ".bin: cannot create its directory"));

  // A failure half-way keeps the previous pair intact and removes the temporary files.
  const std::string prefix = dir.file("keep");
  odc::data::write_bin_dataset(prefix, source);
  CHECK(FailingDataset(source, 3).record(2) == "failing: sequence 2");  // TokenDataset's default record
  REQUIRE_THROWS_WITH(odc::data::write_bin_dataset(prefix, FailingDataset(source, 3)),
                      Catch::Contains("simulated read failure at sequence 3"));
  REQUIRE_FALSE(fs::exists(prefix + ".bin.tmp"));
  REQUIRE_FALSE(fs::exists(prefix + ".idx.tmp"));
  require_same(source, BinTokenDataset(prefix, 32));
}

TEST_CASE("BinTokenDataset reports every corruption with the file and the problem", "[data]") {
  TempDir dir;
  const JsonlTokenDataset source(dir.write("small.jsonl", kJsonl), 32);
  odc::data::write_bin_dataset(dir.file("good"), source);
  const std::vector<char> good_idx = read_bytes(dir.file("good.idx"));
  const std::vector<char> good_bin = read_bytes(dir.file("good.bin"));
  REQUIRE(good_idx.size() == kSpans + 8 * 9 + 8);  // 9 spans: 2 + 0 + 1 + 0 + 1 + 4 + 1; 1 chunk
  REQUIRE_NOTHROW(BinTokenDataset(dir.file("good"), 32));

  // Writes a (possibly modified) copy of the good pair under `name` and returns its prefix.
  const auto pair = [&](const std::string& name, const std::vector<char>& idx,
                        const std::vector<char>& bin) {
    write_bytes(dir.file(name + ".idx"), idx);
    write_bytes(dir.file(name + ".bin"), bin);
    return dir.file(name);
  };
  const auto expect_error = [](const std::string& prefix, const std::string& file,
                               const std::string& what) {
    REQUIRE_THROWS_AS(BinTokenDataset(prefix, 32), odc::Error);
    REQUIRE_THROWS_WITH(BinTokenDataset(prefix, 32),
                        Catch::Contains(prefix + file) && Catch::Contains(what));
  };
  std::vector<char> idx = good_idx;
  std::vector<char> bin = good_bin;

  SECTION("missing files") {
    const std::string only_bin = pair("only_bin", idx, bin);
    fs::remove(only_bin + ".idx");
    expect_error(only_bin, ".idx", "cannot open");
    const std::string only_idx = pair("only_idx", idx, bin);
    fs::remove(only_idx + ".bin");
    expect_error(only_idx, ".bin", "cannot open");
  }
  SECTION("wrong magic") {
    idx[0] = 'X';
    expect_error(pair("magic", idx, bin), ".idx", "wrong magic");
  }
  SECTION("unknown version") {
    set_field<std::uint32_t>(idx, 8, 3);
    expect_error(pair("version", idx, bin), ".idx", "unknown format version 3 (this build reads versions 1 to 2)");
  }
  SECTION("unknown flags") {
    set_field<std::uint32_t>(idx, 12, 4);
    expect_error(pair("flags", idx, bin), ".idx", "unknown flags 0x4");
  }
  SECTION("truncated header") {
    idx.resize(20);
    expect_error(pair("short_header", idx, bin), ".idx", "truncated header");
    expect_error(pair("empty_idx", {}, bin), ".idx", "truncated header");
  }
  SECTION("truncated index") {
    idx.resize(idx.size() - 8);
    expect_error(pair("short_idx", idx, bin), ".idx", "truncated index");
  }
  SECTION("trailing bytes in the index") {
    idx.resize(idx.size() + 8, 0);
    expect_error(pair("long_idx", idx, bin), ".idx", "8 trailing bytes");
  }
  SECTION("implausible counts") {
    set_field<std::int64_t>(idx, 16, 0);
    expect_error(pair("zero_count", idx, bin), ".idx", "sequence count 0");
    idx = good_idx;
    set_field<std::int64_t>(idx, 32, -1);
    expect_error(pair("negative_spans", idx, bin), ".idx", "target span count -1");
  }
  SECTION("checksum mismatch") {
    idx[kSpans] ^= 1;  // a span start, left unsealed
    expect_error(pair("checksum", idx, bin), ".idx", "checksum mismatch");
    idx = good_idx;
    set_field<std::int64_t>(idx, 24, 27);  // header field: total tokens
    expect_error(pair("checksum_header", idx, bin), ".idx", "checksum mismatch");
  }
  SECTION("payload chunk size") {
    set_field<std::int64_t>(idx, 48, 12);  // version 2's chunk size, resealed
    reseal(idx);
    expect_error(pair("chunk_size", idx, bin), ".idx", "payload chunk size 12 bytes");
  }
  SECTION("truncated or oversized .bin") {
    bin.resize(bin.size() - 4);
    expect_error(pair("short_bin", idx, bin), ".bin", "truncated");
    bin = good_bin;
    bin.resize(bin.size() + 4, 0);
    expect_error(pair("long_bin", idx, bin), ".bin", "does not match the index");
  }
  SECTION("offsets past the end of .bin") {
    set_field<std::int64_t>(idx, kOffsets + 8 * 1, 1000);
    reseal(idx);
    expect_error(pair("past_end", idx, bin), ".idx", "past the end");
    // Consistent header and offsets, but more tokens than the .bin holds.
    idx = good_idx;
    set_field<std::int64_t>(idx, 24, 27);
    set_field<std::int64_t>(idx, kOffsets + 8 * kCount, 27);
    reseal(idx);
    expect_error(pair("bin_too_small", idx, bin), ".bin", "truncated");
  }
  SECTION("offsets not monotonic") {
    set_field<std::int64_t>(idx, kOffsets + 8 * 2, 5);  // sequence 1 would be [6, 5)
    reseal(idx);
    expect_error(pair("monotonic", idx, bin), ".idx", "not monotonic");
  }
  SECTION("zero-length sequence") {
    set_field<std::int64_t>(idx, kOffsets + 8 * 2, 6);  // sequence 1 would be [6, 6)
    reseal(idx);
    expect_error(pair("zero_length", idx, bin), ".idx", "sequence 1 has zero length");
  }
  SECTION("span offsets out of order") {
    set_field<std::int64_t>(idx, kSpanOffsets + 8 * 1, 5);  // sequence 0's spans [0, 5), 1's [5, 2)
    reseal(idx);
    expect_error(pair("span_offsets", idx, bin), ".idx", "span offsets of sequence 1");
  }
  SECTION("span out of its sequence's range") {
    set_field<std::uint32_t>(idx, kSpans + 4, 100);  // sequence 0, span 0: (1, 100)
    reseal(idx);
    expect_error(pair("span_range", idx, bin), ".idx", "out of the sequence's range");
  }
  SECTION("overlapping spans") {
    set_field<std::uint32_t>(idx, kSpans + 8, 2);  // sequence 0: (1, 2) then (2, 1)
    reseal(idx);
    expect_error(pair("overlap", idx, bin), ".idx", "non-overlapping");
  }
  SECTION("zero-length span") {
    set_field<std::uint32_t>(idx, kSpans + 4, 0);
    reseal(idx);
    expect_error(pair("span_zero", idx, bin), ".idx", "span 0 of sequence 0 has zero length");
  }
  SECTION("token id >= vocab size") {
    // Sequence 4 starts at token 11; position 2 is token 13 of the file.
    set_field<std::uint32_t>(bin, 4 * 13, 1000);
    reseal_payload(idx, bin);
    expect_error(pair("token_high", idx, bin), ".bin",
                 "token id 1000 at position 2 of sequence 4 is out of range [0, 32)");
    // A negative int32 is a huge uint32: rejected the same way.
    set_field<std::int32_t>(bin, 4 * 13, -1);
    reseal_payload(idx, bin);
    expect_error(pair("token_negative", idx, bin), ".bin", "token id 4294967295");
    // The good file against a smaller vocabulary.
    REQUIRE_THROWS_WITH(BinTokenDataset(dir.file("good"), 10),
                        Catch::Contains("out of range [0, 10)"));
    REQUIRE_THROWS_WITH(BinTokenDataset(dir.file("good"), 0), Catch::Contains("vocab size"));
  }
}

// A bit flip in the token payload trained silently when only the index was checksummed.
TEST_CASE("BinTokenDataset detects damage to the .bin payload, naming the file and the range", "[data]") {
  TempDir dir;
  odc::data::SynthOptions options;
  options.num_sequences = 3000;
  options.min_length = 100;
  options.max_length = 200;
  options.mean_length = 150;
  const std::string jsonl = dir.file("synth.jsonl");
  odc::data::write_synth_jsonl(options, jsonl);
  const std::string prefix = dir.file("big");
  odc::data::write_bin_dataset(prefix, JsonlTokenDataset(jsonl, options.vocab_size));
  const std::vector<char> good = read_bytes(prefix + ".bin");
  REQUIRE(good.size() > (std::size_t{1} << 20));  // more than one 1 MiB chunk
  REQUIRE_NOTHROW(BinTokenDataset(prefix, options.vocab_size));

  // One bit of a token id in the second chunk: the id stays in range, only the checksum sees it.
  std::vector<char> bin = good;
  const std::size_t at = (std::size_t{1} << 20) + 4 * 1000;
  bin[at] ^= 1;
  write_bytes(prefix + ".bin", bin);
  REQUIRE_THROWS_WITH(BinTokenDataset(prefix, options.vocab_size),
                      Catch::Contains(prefix + ".bin: bytes [1048576, ") &&
                          Catch::Contains("(chunk 1 of 2)") && Catch::Contains("the token file is damaged") &&
                          Catch::Contains("do not match their checksum in " + prefix + ".idx"));
  // The same through open_dataset, as odc-train opens it.
  REQUIRE_THROWS_WITH(odc::data::open_dataset(prefix, "bin", options.vocab_size),
                      Catch::Contains(prefix + ".bin") && Catch::Contains("damaged"));

  // A changed byte in the last, partial chunk is caught as well.
  bin = good;
  bin[bin.size() - 1] ^= 0x40;
  write_bytes(prefix + ".bin", bin);
  REQUIRE_THROWS_WITH(BinTokenDataset(prefix, options.vocab_size), Catch::Contains("(chunk 1 of 2)"));
  write_bytes(prefix + ".bin", good);
  REQUIRE_NOTHROW(BinTokenDataset(prefix, options.vocab_size));
}

// Version 1 pairs (no payload checksums) are read with a warning, and convert --format bin
// rewrites them as version 2.
TEST_CASE("BinTokenDataset reads a version 1 pair, rewriting it adds the payload checksums", "[data]") {
  TempDir dir;
  const JsonlTokenDataset source(dir.write("small.jsonl", kJsonl), 32);
  const std::string prefix = dir.file("v2");
  odc::data::write_bin_dataset(prefix, source);
  // Version 1 layout: a 48-byte header, no chunk size, no payload checksums.
  std::vector<char> idx = read_bytes(prefix + ".idx");
  std::vector<char> v1(idx.begin(), idx.begin() + 48);
  v1.insert(v1.end(), idx.begin() + 56, idx.end() - 8);
  set_field<std::uint32_t>(v1, 8, 1);
  reseal(v1);
  const std::string old = dir.file("v1");
  write_bytes(old + ".idx", v1);
  fs::copy_file(prefix + ".bin", old + ".bin");
  const BinTokenDataset opened(old, 32);
  require_same(source, opened);
  odc::data::write_bin_dataset(old, opened);  // in place, as convert --format bin --in P --out P
  CHECK(get_field<std::uint32_t>(read_bytes(old + ".idx"), 8) == 2);
  require_same(source, BinTokenDataset(old, 32));
}

TEST_CASE("Sampler restore continues exactly like an uninterrupted sampler", "[data]") {
  for (const bool shuffle : {true, false}) {
    INFO("shuffle " << shuffle);
    const std::int64_t n = 37;
    // Interrupt at several points, including mid-epoch, exactly at an epoch boundary and after
    // several epochs.
    for (const std::int64_t consumed : {0, 5, 36, 37, 38, 111, 200}) {
      INFO("consumed " << consumed);
      Sampler reference(n, 77, shuffle);
      if (consumed > 0) reference.next(consumed);
      const SamplerState saved = reference.state();
      REQUIRE(saved.seed == 77);
      REQUIRE(saved.dataset_size == n);
      REQUIRE(saved.shuffle == shuffle);
      REQUIRE(saved.epoch == consumed / n);
      REQUIRE(saved.position == consumed % n);

      Sampler resumed(n, 77, shuffle);
      resumed.next(3);  // a restore overrides whatever the sampler had done
      resumed.restore(saved);
      REQUIRE(resumed.state() == saved);
      for (const std::int64_t chunk : {1, 7, 36, 50, 3}) {
        REQUIRE(resumed.next(chunk) == reference.next(chunk));
      }
      REQUIRE(resumed.state() == reference.state());
    }
  }
}

TEST_CASE("Sampler restore rejects a state from a different sampler", "[data]") {
  Sampler sampler(10, 1, true);
  sampler.next(4);
  const SamplerState good = sampler.state();

  SamplerState bad = good;
  bad.dataset_size = 11;
  REQUIRE_THROWS_WITH(Sampler(10, 1, true).restore(bad),
                      Catch::Contains("dataset_size") && Catch::Contains("11"));
  bad = good;
  bad.seed = 2;
  REQUIRE_THROWS_WITH(Sampler(10, 1, true).restore(bad), Catch::Contains("seed"));
  bad = good;
  bad.shuffle = false;
  REQUIRE_THROWS_WITH(Sampler(10, 1, true).restore(bad), Catch::Contains("shuffle"));
  bad = good;
  bad.position = 10;
  REQUIRE_THROWS_WITH(Sampler(10, 1, true).restore(bad), Catch::Contains("position"));
  bad = good;
  bad.epoch = -1;
  REQUIRE_THROWS_WITH(Sampler(10, 1, true).restore(bad), Catch::Contains("epoch"));
}
