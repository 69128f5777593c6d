// The streamed export (checkpoint.export_hf) over in-process ranks: shard files written by the
// ranks in turn, units larger than one gather sent in pieces, and in every case the very bytes a
// single process writes with write_hf_checkpoint from the whole model; a failure fails every rank
// and leaves the target as it was.
#include <filesystem>
#include <fstream>
#include <iterator>

#include <catch2/catch.hpp>

#include "odc/io/hf_checkpoint.h"
#include "odc/io/hf_export.h"
#include "odc/io/safetensors.h"
#include "odc/model/units.h"
#include "odc/train/config/config_schema.h"
#include "odc/train/checkpoint/model_export.h"
#include "unit/rank_threads.h"
#include "unit/temp_dir.h"
#include "unit/tiny_model.h"

using namespace odc;
namespace fs = std::filesystem;

namespace {

Config export_config(const std::vector<std::string>& assignments) {
  Config config(train::trainer_tunables());
  for (const auto& a : assignments) config.apply_assignment(a);
  return config;
}

std::string contents(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Exports the model of seed 3 over `ranks` in-process ranks to DIR/streamed and writes the same
// model from one process (the world-1 store's masters) to DIR/reference; every rank's error.
std::vector<std::string> export_both(const test::TempDir& dir, const model::LlamaConfig& model_config, int ranks,
                                     DType dtype, const std::string& dtype_key, std::int64_t shard_bytes) {
  const auto units = model::build_unit_layouts(model_config);
  const auto config = export_config({"checkpoint.export_hf=" + dir.file("streamed"),
                                     "checkpoint.export_dtype=" + dtype_key,
                                     "checkpoint.export_shard_bytes=" + std::to_string(shard_bytes)});
  const auto errors = test::on_every_rank(ranks, [&](distributed::HostGroup& group) {
    const distributed::ShardLayout layout(units, ranks, group.rank());
    const distributed::ShardStore store(layout, units, model_config, 3);
    train::export_hf(config, group, store, model_config, {});
  });
  const distributed::ShardLayout whole(units, 1, 0);
  const distributed::ShardStore reference(whole, units, model_config, 3);
  io::write_hf_checkpoint(dir.file("reference"), model_config, io::default_hf_architecture(model_config), dtype,
                          [&](int u, float* out) {
                            const float* m = reference.master(u);
                            std::copy(m, m + units[static_cast<std::size_t>(u)].numel, out);
                          },
                          shard_bytes);
  return errors;
}

// Every file of the reference, byte for byte in the export, and nothing else there.
void check_same_files(const test::TempDir& dir) {
  std::size_t files = 0;
  for (const auto& entry : fs::directory_iterator(dir.file("reference"))) {
    const fs::path streamed = fs::path(dir.file("streamed")) / entry.path().filename();
    INFO(streamed.string());
    REQUIRE(fs::exists(streamed));
    CHECK(contents(streamed) == contents(entry.path()));
    ++files;
  }
  CHECK(static_cast<std::size_t>(std::distance(fs::directory_iterator(dir.file("streamed")), {})) == files);
  CHECK_FALSE(fs::exists(dir.file("streamed") + ".tmp"));
}

}  // namespace

TEST_CASE("export_hf: shards of whole units, written by the ranks in turn, are one process's bytes", "[train]") {
  const test::TempDir dir("export_sharded");
  const auto model_config = test::tiny_model(4);
  // bf16: 992 bytes per layer, 256 for the embedding, 272 for the head: with 1000-byte shards the
  // embedding, each layer and the head get a file each (six files: ranks 0, 1, 2, 0, 1, 2).
  const auto errors = export_both(dir, model_config, 3, DType::bf16, "bfloat16", 1000);
  for (const auto& e : errors) REQUIRE(e.empty());
  const io::HfExportLayout layout = io::hf_export_layout(model_config, DType::bf16, 1000);
  REQUIRE(layout.num_files() == 6);
  check_same_files(dir);
  const io::HfCheckpoint exported(dir.file("streamed"));
  CHECK(exported.tensors().sharded());
  CHECK(exported.tensors().files().size() == 6);
  CHECK(exported.dtype() == DType::bf16);
}

TEST_CASE("export_hf: a unit larger than one gather goes in pieces, padding left out", "[train]") {
  const test::TempDir dir("export_pieces");
  auto model_config = test::tiny_model(1);
  // An embedding of 4501 x 1024 elements: 1,536,342 per rank of 3 (the last rank's 2 of padding),
  // more than one gather's 16 MiB / (3 ranks x 4 B) = 1,398,101 per rank: two pieces.
  model_config.vocab_size = 4501;
  model_config.hidden_size = 1024;
  const distributed::ShardLayout layout(model::build_unit_layouts(model_config), 3, 0);
  REQUIRE(layout.unit(0).shard * 3 > layout.unit(0).numel);
  REQUIRE(train::export_piece_elements(layout.unit(0).shard, 3, DType::f32) < layout.unit(0).shard);
  const auto errors = export_both(dir, model_config, 3, DType::f32, "float32", 5'000'000'000);
  for (const auto& e : errors) REQUIRE(e.empty());
  check_same_files(dir);
}

TEST_CASE("export_hf: the pieces of one gather fit in kExportGatherBytes", "[train]") {
  for (const int ranks : {1, 2, 3, 8, 1000}) {
    for (const DType dtype : {DType::f32, DType::bf16}) {
      for (const std::int64_t shard : {std::int64_t{1}, std::int64_t{1000}, std::int64_t{1} << 30}) {
        const std::int64_t n = train::export_piece_elements(shard, ranks, dtype);
        CHECK(n >= 1);
        CHECK(n <= shard);
        CHECK(static_cast<std::size_t>(n) * static_cast<std::size_t>(ranks) * dtype_size(dtype) <=
              std::max(train::kExportGatherBytes, static_cast<std::size_t>(ranks) * dtype_size(dtype)));
      }
    }
  }
}

TEST_CASE("export_hf: a target rank 0 cannot stage fails every rank, and nothing is touched", "[train]") {
  const test::TempDir dir("export_refused");
  const auto model_config = test::tiny_model();
  const auto units = model::build_unit_layouts(model_config);
  // Not an HF checkpoint (no config.json): never replaced.
  fs::create_directories(dir.file("streamed"));
  std::ofstream(dir.file("streamed") + "/notes.txt") << "mine";
  const auto config = export_config({"checkpoint.export_hf=" + dir.file("streamed")});
  const auto errors = test::on_every_rank(3, [&](distributed::HostGroup& group) {
    const distributed::ShardLayout layout(units, 3, group.rank());
    const distributed::ShardStore store(layout, units, model_config, 3);
    train::export_hf(config, group, store, model_config, {});
  });
  for (const auto& e : errors) CHECK_THAT(e, Catch::Contains("is not an HF checkpoint (no config.json)"));
  CHECK(contents(dir.file("streamed") + "/notes.txt") == "mine");
  CHECK_FALSE(fs::exists(dir.file("streamed") + ".tmp"));
}
