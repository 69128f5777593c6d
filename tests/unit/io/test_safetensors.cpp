// safetensors round trip and header validation: every corruption must be an odc::Error that names
// the problem, never a crash or an out-of-bounds read.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "odc/core/dtype.h"
#include "odc/core/error.h"
#include "odc/io/safetensors.h"

namespace {

namespace fs = std::filesystem;

// A per-process scratch directory, removed when the test binary exits.
struct ScratchDir {
  fs::path path = fs::temp_directory_path() /
                  ("odc_test_safetensors_" + std::to_string(static_cast<long>(::getpid())));
  ScratchDir() { fs::create_directories(path); }
  ~ScratchDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

fs::path temp_dir() {
  static const ScratchDir dir;
  return dir.path;
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
