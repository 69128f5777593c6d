// Resharding native checkpoints: the state of 3 ranks, read back on 1, 2 and 4 ranks, is every
// unit's flat buffer exactly (masters and both moments), with zero padding; only the old files
// that overlap are read, each still checksum-verified.
#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>

#include "odc/core/error.h"
#include "odc/distributed/shard/shard_layout.h"
#include "odc/io/native_checkpoint.h"
#include "odc/io/native_reshard.h"
#include "odc/model/units.h"
#include "unit/temp_dir.h"
#include "unit/tiny_model.h"

using namespace odc;
namespace fs = std::filesystem;

namespace {

// A distinct value for element i of unit u, per kind (0: masters, 1: exp_avg, 2: exp_avg_sq).
float value(int kind, int u, std::int64_t i) { return static_cast<float>(kind * 100000 + u * 1000 + i) * 0.5f; }

// Writes a checkpoint of `world` ranks whose state is value(...), zero in the padding.
void write_checkpoint(const std::string& dir, const std::vector<model::UnitLayout>& units, int world) {
  for (int r = 0; r < world; ++r) {
    const distributed::ShardLayout layout(units, world, r);
    const auto owned = static_cast<std::size_t>(layout.owned_elements());
    std::vector<float> kinds[3] = {std::vector<float>(owned), std::vector<float>(owned), std::vector<float>(owned)};
    for (int u = 0; u < layout.num_units(); ++u) {
      for (std::int64_t j = 0; j < layout.unit(u).shard; ++j) {
        const std::int64_t i = layout.shard_begin(u, r) + j;
        for (int k = 0; k < 3; ++k) {
          kinds[k][static_cast<std::size_t>(layout.owned_offset(u) + j)] = i < layout.unit(u).numel ? value(k, u, i) : 0.0f;
        }
      }
    }
    io::write_rank_shards(io::staging_path(dir, 12), r, {kinds[0], kinds[1], kinds[2]});
  }
  io::commit_checkpoint(dir, 12, world, {{"run_id", "r"}}, 0);
}

// Whether rank r of `world` reads exactly value(...) (and zero padding) from `checkpoint`.
bool reads_back(const std::string& checkpoint, const std::vector<model::UnitLayout>& units, int world, int r) {
  const distributed::ShardLayout layout(units, world, r);
  const auto owned = static_cast<std::size_t>(layout.owned_elements());
  std::vector<float> m(owned, -1.0f), a(owned, -1.0f), b(owned, -1.0f);
  io::read_resharded_shards(checkpoint, io::read_manifest(checkpoint), units, layout, {m, a, b});
  const std::vector<float>* kinds[3] = {&m, &a, &b};
  for (int u = 0; u < layout.num_units(); ++u) {
    for (std::int64_t j = 0; j < layout.unit(u).shard; ++j) {
      const std::int64_t i = layout.shard_begin(u, r) + j;
      for (int k = 0; k < 3; ++k) {
        const float want = i < layout.unit(u).numel ? value(k, u, i) : 0.0f;
        if ((*kinds[k])[static_cast<std::size_t>(layout.owned_offset(u) + j)] != want) return false;
      }
    }
  }
  return true;
}

}  // namespace

TEST_CASE("reshard: a 3-rank checkpoint reads back exactly on 1, 2, 3 and 4 ranks", "[io][checkpoint][reshard]") {
  const test::TempDir tmp("reshard");
  const auto units = model::build_unit_layouts(test::tiny_model());
  write_checkpoint(tmp.file("ckpt"), units, 3);
  const std::string checkpoint = tmp.file("ckpt/step-00000012");
  for (int world : {1, 2, 3, 4}) {
    for (int r = 0; r < world; ++r) {
      INFO("world " << world << " rank " << r);
      CHECK(reads_back(checkpoint, units, world, r));
    }
  }

  // Written as a 4-rank checkpoint and read back on 2: the same state (two reshards in a row).
  const nlohmann::json manifest = {{"run_id", "r"}, {"note", "kept"}};
  const auto four = io::write_resharded_checkpoint(checkpoint, units, 4, tmp.file("four"), manifest);
  const auto written = io::read_manifest(four);
  CHECK(written["world_size"] == 4);
  CHECK(written["step"] == 12);
  CHECK(written["note"] == "kept");
  for (int r = 0; r < 2; ++r) CHECK(reads_back(four, units, 2, r));
}

TEST_CASE("reshard: a damaged source file is caught by its checksum", "[io][checkpoint][reshard]") {
  const test::TempDir tmp("reshard_damaged");
  const auto units = model::build_unit_layouts(test::tiny_model());
  write_checkpoint(tmp.file("ckpt"), units, 2);
  const std::string checkpoint = tmp.file("ckpt/step-00000012");
  {
    std::fstream f(checkpoint + "/rank-00001.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    f.put('\x7f');
  }
  const distributed::ShardLayout layout(units, 1, 0);
  std::vector<float> m(static_cast<std::size_t>(layout.owned_elements())), a(m), b(m);
  CHECK_THROWS_WITH(io::read_resharded_shards(checkpoint, io::read_manifest(checkpoint), units, layout, {m, a, b}),
                    Catch::Contains("rank-00001.safetensors") && Catch::Contains("does not match the manifest"));
}
