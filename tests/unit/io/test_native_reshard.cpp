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

// A rank file larger than the reader's piece (2^20 elements per tensor) streams through: the
// windows asked for land in place, one wholly inside a piece and one across pieces, and a damaged
// byte outside every window still fails the checksum (every byte is checked, none is kept).
TEST_CASE("reshard: a rank file streams through in pieces, windows copied, every byte checked",
          "[io][checkpoint][reshard]") {
  const test::TempDir tmp("reshard_pieces");
  constexpr std::int64_t n = (std::int64_t{1} << 20) + (std::int64_t{1} << 19);
  const auto at = [](int kind, std::int64_t i) { return static_cast<float>(kind) * 7.0f + static_cast<float>(i) * 0.5f; };
  std::vector<float> kinds[3];
  for (int k = 0; k < 3; ++k) {
    kinds[k].resize(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) kinds[k][static_cast<std::size_t>(i)] = at(k, i);
  }
  io::write_rank_shards(io::staging_path(tmp.file("ckpt"), 12), 0, {kinds[0], kinds[1], kinds[2]});
  const std::string checkpoint = io::commit_checkpoint(tmp.file("ckpt"), 12, 1, {{"run_id", "r"}}, 0);
  const auto manifest = io::read_manifest(checkpoint);
  // [0, 1.2M) holds the whole first piece; [1.3M, 1.4M) lies inside the second.
  const std::vector<io::ShardCopy> copies = {{0, 0, 1'200'000}, {1'300'000, 1'200'000, 100'000}};
  const auto size = static_cast<std::size_t>(1'300'000);
  std::vector<float> out[3] = {std::vector<float>(size, -1.0f), std::vector<float>(size, -1.0f),
                               std::vector<float>(size, -1.0f)};
  io::read_rank_shard_pieces(checkpoint, manifest, 0, n, copies, {out[0], out[1], out[2]});
  bool exact = true;
  for (int k = 0; k < 3; ++k) {
    for (std::size_t j = 0; j < size; ++j) {
      const std::int64_t i = j < 1'200'000 ? static_cast<std::int64_t>(j) : static_cast<std::int64_t>(j) + 100'000;
      exact = exact && out[k][j] == at(k, i);
    }
  }
  CHECK(exact);
  {  // the last element of exp_avg_sq: in no window
    std::fstream f(checkpoint + "/rank-00000.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-2, std::ios::end);
    f.put('\x7f');
  }
  CHECK_THROWS_WITH(io::read_rank_shard_pieces(checkpoint, manifest, 0, n, copies, {out[0], out[1], out[2]}),
                    Catch::Contains("rank-00000.safetensors") && Catch::Contains("does not match the manifest"));
}
