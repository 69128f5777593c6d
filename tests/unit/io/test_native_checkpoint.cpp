// Native checkpoints: commit protocol (partial directories are never picked), pruning, and damage
// detection on load.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <optional>

#include <catch2/catch.hpp>

#include "odc/core/error.h"
#include "odc/io/native_checkpoint.h"

using namespace odc;
namespace fs = std::filesystem;

namespace {

struct Shards {
  std::vector<float> masters, m, v;
  explicit Shards(int rank, std::size_t n = 37) : masters(n), m(n), v(n) {
    for (std::size_t i = 0; i < n; ++i) {
      masters[i] = static_cast<float>(rank) + 0.25f * static_cast<float>(i);
      m[i] = -0.5f * static_cast<float>(i);
      v[i] = 1e-3f * static_cast<float>(i * i + 1);
    }
  }
  io::RankShards view() const { return {masters, m, v}; }
};

void save(const std::string& dir, std::int64_t step, int world, int keep) {
  for (int r = 0; r < world; ++r) io::write_rank_shards(io::staging_path(dir, step), r, Shards(r).view());
  io::commit_checkpoint(dir, step, world, {{"note", "test"}}, keep);
}

}  // namespace

TEST_CASE("a committed checkpoint reads back exactly, older ones are pruned", "[io][checkpoint]") {
  const auto dir = (fs::temp_directory_path() / "odc_native_ckpt").string();
  fs::remove_all(dir);
  save(dir, 2, 2, 2);
  save(dir, 4, 2, 2);
  save(dir, 6, 2, 2);
  REQUIRE_FALSE(fs::exists(fs::path(dir) / io::checkpoint_name(2)));  // keep 2
  REQUIRE(fs::exists(fs::path(dir) / io::checkpoint_name(4)));
  const auto latest = io::latest_checkpoint(dir);
  REQUIRE(latest.has_value());
  REQUIRE(fs::path(*latest).filename() == io::checkpoint_name(6));
  const auto manifest = io::read_manifest(*latest);
  REQUIRE(manifest["step"] == 6);
  REQUIRE(manifest["world_size"] == 2);
  REQUIRE(manifest["note"] == "test");
  for (int r = 0; r < 2; ++r) {
    Shards out(9);  // overwritten
    io::read_rank_shards(*latest, manifest, r, {out.masters, out.m, out.v});
    const Shards expected(r);
    REQUIRE(out.masters == expected.masters);
    REQUIRE(out.m == expected.m);
    REQUIRE(out.v == expected.v);
  }
}

TEST_CASE("a crash before the commit leaves the previous checkpoint as the latest", "[io][checkpoint]") {
  const auto dir = (fs::temp_directory_path() / "odc_native_ckpt_crash").string();
  fs::remove_all(dir);
  save(dir, 3, 2, 0);
  // Step 5: rank 0 wrote, rank 1 did not, nobody committed (the process died).
  io::write_rank_shards(io::staging_path(dir, 5), 0, Shards(0).view());
  REQUIRE(fs::path(*io::latest_checkpoint(dir)).filename() == io::checkpoint_name(3));
  // Committing without every rank's shards is refused, naming the missing rank.
  REQUIRE_THROWS_WITH(io::commit_checkpoint(dir, 5, 2, {}, 0), Catch::Contains("rank 1"));
  // The next successful commit removes the stale partial directory.
  save(dir, 7, 2, 0);
  REQUIRE_FALSE(fs::exists(io::staging_path(dir, 5)));
  REQUIRE(fs::path(*io::latest_checkpoint(dir)).filename() == io::checkpoint_name(7));
  REQUIRE_FALSE(io::latest_checkpoint((fs::path(dir) / "nothing-here").string()).has_value());
}

TEST_CASE("damaged or mismatched checkpoints are errors naming the file", "[io][checkpoint]") {
  const auto dir = (fs::temp_directory_path() / "odc_native_ckpt_damage").string();
  fs::remove_all(dir);
  save(dir, 1, 1, 0);
  const auto path = *io::latest_checkpoint(dir);
  const auto manifest = io::read_manifest(path);
  SECTION("a flipped byte in the data fails the checksum") {
    const auto file = fs::path(path) / "rank-00000.safetensors";
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-5, std::ios::end);
    f.put('\x7f');
    f.close();
    Shards out(0);
    REQUIRE_THROWS_WITH(io::read_rank_shards(path, manifest, 0, {out.masters, out.m, out.v}),
                        Catch::Contains("checksum") && Catch::Contains("rank-00000.safetensors"));
  }
  SECTION("buffers of another size (another model or world size)") {
    Shards out(0, 36);
    REQUIRE_THROWS_WITH(io::read_rank_shards(path, manifest, 0, {out.masters, out.m, out.v}),
                        Catch::Contains("37 elements") && Catch::Contains("36"));
  }
  SECTION("a manifest that is not JSON") {
    std::ofstream(fs::path(path) / "manifest.json") << "{ not json";
    REQUIRE_THROWS_WITH(io::read_manifest(path), Catch::Contains("manifest.json"));
    REQUIRE_FALSE(io::latest_checkpoint(dir).has_value());  // skipped, not picked
  }
}

TEST_CASE("pruning keeps the newest K of the committing run only, retired checkpoints leave the search",
          "[io][checkpoint]") {
  const auto dir = (fs::temp_directory_path() / ("odc_native_ckpt_runs_" + std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  auto commit = [&](std::int64_t step, const std::string& run) {
    for (int r = 0; r < 2; ++r) io::write_rank_shards(io::staging_path(dir, step), r, Shards(r).view());
    io::commit_checkpoint(dir, step, 2, {{"run_id", run}}, 2);
  };
  commit(50, "old");
  commit(60, "old");
  commit(10, "new");
  commit(20, "new");
  commit(30, "new");  // keep 2 of run "new": step-10 goes, the other run's step-50/60 stay
  std::vector<std::int64_t> steps;
  for (const auto& e : io::list_checkpoints(dir)) steps.push_back(e.step);
  CHECK(steps == std::vector<std::int64_t>{20, 30, 50, 60});

  const auto where = io::retire_checkpoints(dir, {dir + "/step-00000050", dir + "/step-00000060"}, "branch");
  CHECK(where == dir + "/retired/branch");
  CHECK(fs::exists(fs::path(where) / "step-00000060" / "manifest.json"));
  CHECK(fs::path(*io::latest_checkpoint(dir)).filename() == "step-00000030");
  // A second retirement under the same name gets a fresh directory.
  CHECK(io::retire_checkpoints(dir, {dir + "/step-00000020"}, "branch") == dir + "/retired/branch-2");
  CHECK(io::list_checkpoints(dir).size() == 1);
  fs::remove_all(dir);
}

TEST_CASE("pruning never removes the protected (best) checkpoint: it stays as one more than keep", "[io][checkpoint]") {
  const auto dir = (fs::temp_directory_path() / ("odc_native_ckpt_best_" + std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  auto commit = [&](std::int64_t step, std::optional<std::int64_t> best) {
    for (int r = 0; r < 2; ++r) io::write_rank_shards(io::staging_path(dir, step), r, Shards(r).view());
    io::commit_checkpoint(dir, step, 2, {{"run_id", "r"}}, 2, best);
  };
  auto steps = [&] {
    std::vector<std::int64_t> out;
    for (const auto& e : io::list_checkpoints(dir)) out.push_back(e.step);
    return out;
  };
  commit(10, std::nullopt);
  commit(20, 10);
  commit(30, 10);
  commit(40, 10);  // keep 2 (30, 40) and the best (10); 20 goes
  CHECK(steps() == std::vector<std::int64_t>{10, 30, 40});
  commit(50, 40);  // the best moved on: 10 is pruned like any other, 30 too
  CHECK(steps() == std::vector<std::int64_t>{40, 50});
  fs::remove_all(dir);
}

TEST_CASE("a checkpoint holding a NaN or inf is refused on load, naming the file and the tensor", "[io][checkpoint]") {
  const auto dir = (fs::temp_directory_path() / ("odc_native_ckpt_nan_" + std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  const float bad = GENERATE(std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity());
  Shards saved(0);
  saved.v[4] = bad;  // the checksum matches: the run that saved it had diverged
  io::write_rank_shards(io::staging_path(dir, 1), 0, saved.view());
  io::commit_checkpoint(dir, 1, 1, {}, 0);
  const auto path = *io::latest_checkpoint(dir);
  Shards out(0);
  REQUIRE_THROWS_WITH(io::read_rank_shards(path, io::read_manifest(path), 0, {out.masters, out.m, out.v}),
                      Catch::Contains("rank-00000.safetensors") && Catch::Contains("holds a non-finite value") &&
                          Catch::Contains("tensor 'exp_avg_sq'") && Catch::Contains("at element 4") &&
                          Catch::Contains("resume from an earlier checkpoint (checkpoint.resume="));
  fs::remove_all(dir);
}
