// safetensors round trip and header validation: every corruption must be an odc::Error that names
// the problem, never a crash or an out-of-bounds read.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <unistd.h>

#include "odc/core/dtype.h"
#include "odc/core/error.h"
#include "odc/core/process_stats.h"
#include "odc/io/safetensors.h"
#include "odc/io/safetensors_sharded.h"
#include "odc/io/safetensors_writer.h"
#include "unit/temp_dir.h"

namespace {

namespace fs = std::filesystem;

// A per-process scratch directory, removed when the test binary exits.
fs::path temp_dir() {
  static const odc::test::TempDir dir("safetensors");
  return dir.path();
}

// Writes a file with a hand-made header (length field = header size unless overridden).
void write_raw(const fs::path& path, const std::string& header, const std::vector<char>& data,
               std::int64_t length_override = -1) {
  std::ofstream out(path, std::ios::binary);
  std::uint64_t length = length_override >= 0 ? static_cast<std::uint64_t>(length_override) : header.size();
  for (int i = 0; i < 8; ++i) {
    out.put(static_cast<char>(length & 0xff));
    length >>= 8;
  }
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

std::string error_of(const fs::path& path) {
  try {
    odc::io::SafetensorsFile file(path.string());
  } catch (const odc::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("safetensors round trip of f32, bf16 and i32 tensors", "[io]") {
  const fs::path path = temp_dir() / "roundtrip.safetensors";
  const std::vector<float> weights = {1.0f, -2.5f, 3.25f, 0.0f, 1e-20f, -7.0f};
  std::vector<std::uint16_t> halves;
  for (float v : {0.5f, -1.0f, 3.0f}) halves.push_back(odc::f32_to_bf16(v));  // odd byte count
  const std::vector<std::int32_t> ids = {7, -1, 123456};

  odc::io::write_safetensors(path.string(),
                             {{"model.w", odc::DType::f32, {2, 3}, weights.data()},
                              {"model.h", odc::DType::bf16, {3}, halves.data()},
                              {"ids", odc::DType::i32, {3, 1}, ids.data()},
                              {"empty", odc::DType::f32, {0, 4}, nullptr}},
                             {{"format", "pt"}, {"step", "12"}});
  REQUIRE_FALSE(fs::exists(path.string() + ".tmp"));
  // Header length is a multiple of 8 so the data region is 8-byte aligned.
  REQUIRE((fs::file_size(path) - 8 - (6 * 4 + 3 * 2 + 3 * 4)) % 8 == 0);

  odc::io::SafetensorsFile file(path.string());
  // names() lists tensors in data order, i.e. the order they were written.
  CHECK(file.names() == std::vector<std::string>{"model.w", "model.h", "ids", "empty"});
  CHECK(file.metadata().at("format") == "pt");
  CHECK(file.metadata().at("step") == "12");

  const auto& w = file.info("model.w");
  CHECK(w.dtype == odc::DType::f32);
  CHECK(w.shape == odc::Shape{2, 3});
  CHECK(w.end - w.begin == 24);
  CHECK(file.read_f32("model.w", 6) == weights);

  const auto& h = file.info("model.h");
  CHECK(h.dtype == odc::DType::bf16);
  CHECK(file.read_f32("model.h") == std::vector<float>{0.5f, -1.0f, 3.0f});

  const auto& i = file.info("ids");
  CHECK(i.dtype == odc::DType::i32);
  CHECK(i.shape == odc::Shape{3, 1});
  std::vector<std::int32_t> ids_back(3);
  std::memcpy(ids_back.data(), i.bytes.data(), i.bytes.size());
  CHECK(ids_back == ids);

  CHECK(file.info("empty").numel() == 0);
  CHECK_THROWS_WITH(file.info("missing"), Catch::Contains("no tensor 'missing'"));
  CHECK_THROWS_WITH(file.read_f32("model.w", 5), Catch::Contains("expected 5 elements"));
  CHECK_THROWS_WITH(file.read_f32("ids"), Catch::Contains("floating-point"));
}

TEST_CASE("safetensors writer rejects duplicate and reserved names", "[io]") {
  const fs::path path = temp_dir() / "dup.safetensors";
  const float x = 1.0f;
  CHECK_THROWS_WITH(odc::io::write_safetensors(path.string(), {{"a", odc::DType::f32, {1}, &x},
                                                               {"a", odc::DType::f32, {1}, &x}}),
                    Catch::Contains("duplicate tensor 'a'"));
  CHECK_THROWS_WITH(
      odc::io::write_safetensors(path.string(), {{"__metadata__", odc::DType::f32, {1}, &x}}),
      Catch::Contains("invalid tensor name"));
}

TEST_CASE("safetensors reader rejects corrupted files", "[io]") {
  const fs::path dir = temp_dir();
  const fs::path path = dir / "bad.safetensors";
  const std::vector<char> eight(8, 0);
  const std::string good_entry = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";

  SECTION("sanity: the hand-made good file is accepted") {
    write_raw(path, good_entry, eight);
    CHECK(error_of(path).empty());
  }
  SECTION("file shorter than the length field") {
    std::ofstream(path, std::ios::binary).write("abc", 3);
    CHECK_THAT(error_of(path), Catch::Contains("truncated") && Catch::Contains(path.string()));
  }
  SECTION("header length past the end of the file") {
    write_raw(path, good_entry, eight, 1000);
    CHECK_THAT(error_of(path), Catch::Contains("header length 1000 exceeds the file"));
  }
  SECTION("absurd header length") {
    write_raw(path, good_entry, eight, std::int64_t{1} << 62);
    CHECK_THAT(error_of(path), Catch::Contains("exceeds the file"));
  }
  SECTION("data truncated after the header") {
    write_raw(path, good_entry, std::vector<char>(4, 0));
    CHECK_THAT(error_of(path), Catch::Contains("tensor 't'") && Catch::Contains("out of range"));
  }
  SECTION("header is not JSON") {
    write_raw(path, "{\"t\": [", eight);
    CHECK_THAT(error_of(path), Catch::Contains("not valid JSON"));
  }
  SECTION("header is not an object") {
    write_raw(path, "[1, 2]", eight);
    CHECK_THAT(error_of(path), Catch::Contains("not a JSON object"));
  }
  SECTION("overlapping offsets") {
    write_raw(path,
              R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
              R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
              eight);
    CHECK_THAT(error_of(path), Catch::Contains("overlap") && Catch::Contains("'b'") &&
                                   Catch::Contains("'a'"));
  }
  SECTION("offsets out of range") {
    write_raw(path, R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", eight);
    CHECK_THAT(error_of(path), Catch::Contains("tensor 't'") && Catch::Contains("out of range"));
  }
  SECTION("begin after end") {
    write_raw(path, R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", eight);
    CHECK_THAT(error_of(path), Catch::Contains("begin after end"));
  }
  SECTION("unknown dtype") {
    write_raw(path, R"({"t":{"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]}})", eight);
    CHECK_THAT(error_of(path), Catch::Contains("tensor 't'") &&
                                   Catch::Contains("unsupported dtype 'F8_E4M3'"));
  }
  SECTION("shape times dtype size does not match the offsets") {
    write_raw(path, R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight);
    CHECK_THAT(error_of(path), Catch::Contains("tensor 't'") && Catch::Contains("needs 12 bytes"));
  }
  SECTION("negative dimension") {
    write_raw(path, R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight);
    CHECK_THAT(error_of(path), Catch::Contains("shape") && Catch::Contains("non-negative"));
  }
  SECTION("overflowing shape") {
    write_raw(path,
              R"({"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
              eight);
    CHECK_THAT(error_of(path), Catch::Contains("too large"));
  }
  SECTION("missing data_offsets") {
    write_raw(path, R"({"t":{"dtype":"F32","shape":[2]}})", eight);
    CHECK_THAT(error_of(path), Catch::Contains("missing 'data_offsets'"));
  }
  SECTION("metadata value that is not a string") {
    write_raw(path, R"({"__metadata__":{"k":1}})", {});
    CHECK_THAT(error_of(path), Catch::Contains("__metadata__"));
  }
  SECTION("missing file") {
    CHECK_THAT(error_of(dir / "nope.safetensors"), Catch::Contains("cannot open"));
  }
}

TEST_CASE("safetensors reader rejects more corruptions", "[io]") {
  const fs::path path = temp_dir() / "bad2.safetensors";
  const std::vector<char> eight(8, 0);
  SECTION("float shape entry") {
    write_raw(path, R"({"t":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", eight);
    CHECK_THAT(error_of(path), Catch::Contains("tensor 't'") && Catch::Contains("non-negative integers"));
  }
  SECTION("string offsets") {
    write_raw(path, R"({"t":{"dtype":"F32","shape":[2],"data_offsets":["0","8"]}})", eight);
    CHECK_THAT(error_of(path), Catch::Contains("data_offsets"));
  }
  SECTION("three offsets") {
    write_raw(path, R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8,8]}})", eight);
    CHECK_THAT(error_of(path), Catch::Contains("expected 2 entries"));
  }
  SECTION("file cut inside the header") {
    const std::string header = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
    write_raw(path, header.substr(0, 20), {}, static_cast<std::int64_t>(header.size()));
    CHECK_THAT(error_of(path), Catch::Contains("exceeds the file") && Catch::Contains(path.string()));
  }
  SECTION("dtype that is not a string") {
    write_raw(path, R"({"t":{"dtype":7,"shape":[2],"data_offsets":[0,8]}})", eight);
    CHECK_THAT(error_of(path), Catch::Contains("tensor 't'") && Catch::Contains("dtype is not a string"));
  }
  SECTION("offset past the end of a 64-bit range") {
    write_raw(path, R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[18446744073709551608,0]}})", eight);
    CHECK_THAT(error_of(path), Catch::Contains("tensor 't'"));
  }
}

TEST_CASE("safetensors parses an in-memory image like the file", "[io]") {
  const fs::path path = temp_dir() / "memory.safetensors";
  const std::vector<float> values = {1.5f, -2.0f, 0.25f};
  odc::io::write_safetensors(path.string(), {{"v", odc::DType::f32, {3}, values.data()}});
  std::ifstream in(path, std::ios::binary);
  const std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> image(chars.size());
  std::memcpy(image.data(), chars.data(), chars.size());

  odc::io::SafetensorsFile file(image, "in-memory image");
  CHECK(file.read_f32("v") == values);
  // The tensor spans point into the object's own copy, which must survive a move.
  odc::io::SafetensorsFile moved(std::move(file));
  CHECK(moved.read_f32("v") == values);

  image.resize(image.size() - 4);  // cut the last element
  CHECK_THROWS_WITH(odc::io::SafetensorsFile(image, "cut image"),
                    Catch::Contains("cut image") && Catch::Contains("out of range"));
  CHECK_THROWS_WITH(odc::io::SafetensorsFile(std::vector<std::byte>(3), "tiny"),
                    Catch::Contains("tiny") && Catch::Contains("truncated"));
}

TEST_CASE("safetensors read_f32_range converts a slice of f32, bf16 and f16 tensors", "[io]") {
  const fs::path path = temp_dir() / "range.safetensors";
  const std::vector<float> values = {1.0f, -2.0f, 0.5f, 3.0f, -0.125f, 8.0f};
  std::vector<std::uint16_t> bf16, f16;
  for (float v : values) {
    bf16.push_back(odc::f32_to_bf16(v));
    f16.push_back(odc::f32_to_f16(v));
  }
  odc::io::write_safetensors(path.string(), {{"f32", odc::DType::f32, {2, 3}, values.data()},
                                             {"bf16", odc::DType::bf16, {2, 3}, bf16.data()},
                                             {"f16", odc::DType::f16, {6}, f16.data()}});
  odc::io::SafetensorsFile file(path.string());
  for (const char* name : {"f32", "bf16", "f16"}) {
    std::vector<float> out(3, -99.0f);
    file.read_f32_range(name, 2, 3, out.data());
    CHECK(out == std::vector<float>{0.5f, 3.0f, -0.125f});
    file.read_f32_range(name, 6, 0, out.data());  // empty range at the end is fine
  }
  std::vector<float> out(8);
  CHECK_THROWS_WITH(file.read_f32_range("f32", 4, 3, out.data()),
                    Catch::Contains("tensor 'f32'") && Catch::Contains("cannot read [4, 7)"));
  CHECK_THROWS_WITH(file.read_f32_range("f32", -1, 1, out.data()), Catch::Contains("cannot read"));
}

// A load holds the weights once: the file's pages a read converted leave this process's resident
// set (they stay in the page cache). 24 MiB of f32 in 6 MiB pieces of bf16 and f32 tensors: kept
// mapped, the pages read would add 24 MiB + 12 MiB to the resident set; released, what stays are
// the few pages the ranges share with their neighbours. The bound (4 MiB) leaves room for the
// allocator's and the test's own pages, far below either tensor.
TEST_CASE("safetensors read_f32_range releases the file's pages it has converted", "[io]") {
  const fs::path path = temp_dir() / "release.safetensors";
  constexpr std::int64_t n = std::int64_t{6} << 20;
  std::vector<float> values(static_cast<std::size_t>(n));
  std::vector<std::uint16_t> bf16(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    values[static_cast<std::size_t>(i)] = static_cast<float>(i % 256);
    bf16[static_cast<std::size_t>(i)] = odc::f32_to_bf16(values[static_cast<std::size_t>(i)]);
  }
  odc::io::write_safetensors(path.string(), {{"a", odc::DType::bf16, {n}, bf16.data()},
                                             {"w", odc::DType::f32, {n}, values.data()}});
  std::vector<float> out(static_cast<std::size_t>(n), -1.0f);  // touched: resident before the reads
  const odc::io::SafetensorsFile file(path.string());
  const std::int64_t before = odc::read_process_stats().rss_bytes;
  file.read_f32_range("a", 0, n, out.data());
  CHECK(out == values);  // integers below 256 are exact in bf16
  file.read_f32_range("w", 0, n, out.data());
  CHECK(out == values);
  const std::int64_t grown = odc::read_process_stats().rss_bytes - before;
  INFO("resident set grew by " << grown << " bytes over the reads");
  CHECK(grown < (std::int64_t{4} << 20));
  // The released pages are the file's still: a second read maps them again.
  std::fill(out.begin(), out.end(), -1.0f);
  file.read_f32_range("w", 1, n - 2, out.data());
  CHECK(std::equal(out.begin(), out.begin() + (n - 2), values.begin() + 1));
}

TEST_CASE("safetensors stream writer checks the order and never leaves a partial file", "[io]") {
  const fs::path path = temp_dir() / "stream.safetensors";
  const std::vector<float> a = {1.0f, 2.0f};
  const std::vector<float> b = {3.0f};
  const std::vector<odc::io::SafetensorsEntry> layout = {{"a", odc::DType::f32, {2}, nullptr},
                                                         {"b", odc::DType::f32, {1}, nullptr}};
  {
    odc::io::SafetensorsStreamWriter writer(path.string(), layout);
    CHECK_THROWS_WITH(writer.append("b", b.data()), Catch::Contains("'b' appended where 'a' comes next"));
    writer.append("a", a.data());
    CHECK_THROWS_WITH(writer.commit(), Catch::Contains("commit after 1 of 2 tensors"));
    CHECK(fs::exists(path.string() + ".tmp"));
  }
  // Abandoned: the temporary file is gone and nothing appeared under the final name.
  CHECK_FALSE(fs::exists(path.string() + ".tmp"));
  CHECK_FALSE(fs::exists(path));

  odc::io::SafetensorsStreamWriter writer(path.string(), layout, {{"format", "pt"}});
  writer.append("a", a.data());
  writer.append("b", b.data());
  CHECK_THROWS_WITH(writer.append("c", b.data()), Catch::Contains("all 2 tensors are written"));
  writer.commit();
  odc::io::SafetensorsFile file(path.string());
  CHECK(file.read_f32("a") == a);
  CHECK(file.read_f32("b") == b);
  CHECK(file.metadata().at("format") == "pt");
}

TEST_CASE("safetensors piece writer: pieces in any order, across tensors, and a missing byte is refused", "[io]") {
  const fs::path path = temp_dir() / "pieces.safetensors";
  // Two tensors back to back: a (3 floats) then b (2 floats); the pieces straddle their border.
  const std::vector<float> values = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f};
  const std::vector<odc::io::SafetensorsEntry> layout = {{"a", odc::DType::f32, {3}, nullptr},
                                                         {"b", odc::DType::f32, {2}, nullptr}};
  {
    odc::io::SafetensorsPieceWriter writer(path.string(), layout);
    CHECK(writer.data_bytes() == 20);
    CHECK(writer.tensor_offset(1) == 12);
    writer.write_at(8, values.data() + 2, 8);  // a[2], b[0]
    CHECK_THROWS_WITH(writer.commit(), Catch::Contains("commit after 8 of its 20 data bytes"));
    CHECK_THROWS_WITH(writer.write_at(16, values.data(), 8),
                      Catch::Contains("bytes [16, 24) written, but the data region holds 20 bytes"));
  }
  CHECK_FALSE(fs::exists(path.string() + ".tmp"));  // abandoned: removed
  CHECK_FALSE(fs::exists(path));

  odc::io::SafetensorsPieceWriter writer(path.string(), layout, {{"format", "pt"}});
  writer.write_at(16, values.data() + 4, 4);  // b[1] first
  writer.write_at(8, values.data() + 2, 8);
  writer.write_at(0, values.data(), 8);
  writer.commit();
  CHECK_THROWS_WITH(writer.write_at(0, values.data(), 4), Catch::Contains("after commit"));
  odc::io::SafetensorsFile file(path.string());
  CHECK(file.read_f32("a") == std::vector<float>{1.0f, 2.0f, 3.0f});
  CHECK(file.read_f32("b") == std::vector<float>{4.0f, 5.0f});
  CHECK(file.data_start() % 8 == 0);  // the header is padded to 8 bytes
  CHECK(fs::file_size(path) == file.data_start() + 20);
}

namespace {

// Writes tensors t0..t{n-1} of `elements` f32 values each (value = tensor index) as the shards
// plan_safetensors_shards lays out, with the index when sharded; returns the file names.
std::vector<std::string> write_numbered(const fs::path& dir, int n, std::int64_t elements,
                                        std::int64_t max_shard_bytes,
                                        std::vector<std::vector<float>>& storage, const std::vector<int>& groups = {}) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::vector<odc::io::SafetensorsEntry> entries;
  storage.assign(static_cast<std::size_t>(n), {});
  for (int i = 0; i < n; ++i) {
    storage[static_cast<std::size_t>(i)].assign(static_cast<std::size_t>(elements), static_cast<float>(i));
    entries.push_back({"t" + std::to_string(i), odc::DType::f32, {elements},
                       storage[static_cast<std::size_t>(i)].data()});
  }
  const auto plan = odc::io::plan_safetensors_shards(entries, max_shard_bytes, groups);
  for (std::size_t f = 0; f < plan.files.size(); ++f) {
    std::vector<odc::io::SafetensorsEntry> in_file;
    for (std::size_t i = 0; i < entries.size(); ++i) {
      if (plan.file_of[i] == f) in_file.push_back(entries[i]);
    }
    odc::io::write_safetensors((dir / plan.files[f]).string(), in_file);
  }
  std::vector<std::string> files = plan.files;
  if (plan.sharded()) {
    std::ofstream(dir / odc::io::kSafetensorsIndexName) << odc::io::safetensors_index_text(entries, plan);
    files.emplace_back(odc::io::kSafetensorsIndexName);
  }
  return files;
}

std::string shards_error(const fs::path& path) {
  try {
    odc::io::SafetensorsShards shards(path.string());
  } catch (const odc::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("sharded safetensors: the plan splits by size, the index maps every tensor", "[io]") {
  const fs::path dir = temp_dir() / "sharded";
  std::vector<std::vector<float>> storage;

  SECTION("everything fits: one model.safetensors, no index") {
    const auto files = write_numbered(dir, 3, 4, 1000, storage);
    CHECK(files == std::vector<std::string>{"model.safetensors"});
    CHECK_FALSE(fs::exists(dir / "model.safetensors.index.json"));
    odc::io::SafetensorsShards shards((dir / "model.safetensors").string());
    CHECK_FALSE(shards.sharded());
    CHECK(shards.names() == std::vector<std::string>{"t0", "t1", "t2"});
  }
  SECTION("shards of at most max_shard_bytes, in order, with an index") {
    // 16 bytes per tensor, 40 per shard: two tensors per shard, five tensors -> three shards.
    const auto files = write_numbered(dir, 5, 4, 40, storage);
    CHECK(files == std::vector<std::string>{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                            "model-00003-of-00003.safetensors", "model.safetensors.index.json"});
    std::ifstream in(dir / "model.safetensors.index.json");
    const std::string index((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK_THAT(index, Catch::Contains("\"total_size\": 80") &&
                          Catch::Contains("\"t4\": \"model-00003-of-00003.safetensors\""));
    odc::io::SafetensorsShards shards((dir / "model.safetensors.index.json").string());
    CHECK(shards.sharded());
    CHECK(shards.files().size() == 3);
    CHECK(shards.names() == std::vector<std::string>{"t0", "t1", "t2", "t3", "t4"});
    CHECK(shards.file_of("t3").path() == (dir / "model-00002-of-00003.safetensors").string());
    CHECK(shards.file_of("t4").read_f32("t4") == std::vector<float>(4, 4.0f));
    CHECK(shards.info("t2").shape == odc::Shape{4});
    CHECK_THROWS_WITH(shards.file_of("t9"), Catch::Contains("no tensor 't9'"));
  }
  SECTION("a tensor larger than the limit gets a shard of its own") {
    const auto files = write_numbered(dir, 2, 100, 40, storage);
    CHECK(files.size() == 3);  // two shards + index
  }
  SECTION("a group stays in one file: placed as one tensor of its total size") {
    // 16 bytes per tensor, 40 per shard; groups {t0}, {t1, t2, t3}, {t4}: the 48-byte group gets a
    // shard of its own although t1 alone would have joined t0 (as it does ungrouped, above).
    const auto files = write_numbered(dir, 5, 4, 40, storage, {0, 1, 1, 1, 2});
    REQUIRE(files.size() == 4);  // three shards + index
    odc::io::SafetensorsShards shards((dir / "model.safetensors.index.json").string());
    CHECK(shards.file_of("t0").names() == std::vector<std::string>{"t0"});
    CHECK(shards.file_of("t2").names() == std::vector<std::string>{"t1", "t2", "t3"});
    CHECK(shards.file_of("t4").names() == std::vector<std::string>{"t4"});
  }
  SECTION("bad sizes and group lists") {
    const float x = 1.0f;
    CHECK_THROWS_WITH(odc::io::plan_safetensors_shards({{"a", odc::DType::f32, {1}, &x}}, 0),
                      Catch::Contains("must be positive"));
    CHECK_THROWS_WITH(odc::io::plan_safetensors_shards({{"a", odc::DType::f32, {1}, &x}}, 4, {0, 1}),
                      Catch::Contains("2 group numbers for 1 tensors"));
  }
}

TEST_CASE("sharded safetensors: a damaged index or shard set is a clear error", "[io]") {
  const fs::path dir = temp_dir() / "sharded_bad";
  std::vector<std::vector<float>> storage;
  write_numbered(dir, 4, 4, 32, storage);  // two shards of two tensors
  const fs::path index = dir / "model.safetensors.index.json";
  const std::string shard1 = "model-00001-of-00002.safetensors";
  const std::string shard2 = "model-00002-of-00002.safetensors";
  auto write_index = [&](const std::string& text) { std::ofstream(index) << text; };
  REQUIRE(shards_error(index).empty());

  SECTION("missing shard file") {
    fs::remove(dir / shard2);
    CHECK_THAT(shards_error(index), Catch::Contains(shard2) && Catch::Contains("does not exist"));
  }
  SECTION("tensor mapped to a shard that lacks it") {
    write_index(R"({"weight_map": {"t0": ")" + shard1 + R"(", "t1": ")" + shard1 + R"(", "t2": ")" + shard1 +
                R"(", "t3": ")" + shard2 + R"("}})");
    CHECK_THAT(shards_error(index), Catch::Contains("tensor 't2'") && Catch::Contains("does not contain it"));
  }
  SECTION("shard holds a tensor the index does not list") {
    write_index(R"({"weight_map": {"t0": ")" + shard1 + R"(", "t1": ")" + shard1 + R"(", "t2": ")" + shard2 +
                R"("}})");
    CHECK_THAT(shards_error(index), Catch::Contains("holds tensor 't3'") && Catch::Contains("does not list"));
  }
  SECTION("shard name climbing out of the directory") {
    write_index(R"({"weight_map": {"t0": "../x.safetensors"}})");
    CHECK_THAT(shards_error(index), Catch::Contains("'../x.safetensors'") && Catch::Contains("file name"));
  }
  SECTION("no weight_map") {
    write_index(R"({"metadata": {"total_size": 64}})");
    CHECK_THAT(shards_error(index), Catch::Contains("weight_map"));
  }
  SECTION("not JSON") {
    write_index("{\"weight_map\": ");
    CHECK_THAT(shards_error(index), Catch::Contains(index.string()) && Catch::Contains("not valid JSON"));
  }
  SECTION("truncated shard") {
    fs::resize_file(dir / shard1, fs::file_size(dir / shard1) - 3);
    CHECK_THAT(shards_error(index), Catch::Contains(shard1) && Catch::Contains("out of range"));
  }
}
