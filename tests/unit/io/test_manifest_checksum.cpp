// The manifest checks itself: an edit of any value is a damaged manifest; one written before
// manifests had a checksum still reads; a step directory without a manifest is named as damaged,
// and a commit never overwrites it.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "odc/core/error.h"
#include "odc/io/native_checkpoint.h"

using namespace odc;
namespace fs = std::filesystem;

namespace {
void save(const std::string& dir, std::int64_t step) {
  std::vector<float> a(5, 1.0f), b(5, 0.5f), c(5, 0.25f);
  io::write_rank_shards(io::staging_path(dir, step), 0, {a, b, c});
  io::commit_checkpoint(dir, step, 1, {{"sampler", {{"position", 40}}}, {"optimizer_steps", 4}}, 0);
}
nlohmann::json load_json(const fs::path& p) { return nlohmann::json::parse(std::ifstream(p)); }
void store_json(const fs::path& p, const nlohmann::json& j) { std::ofstream(p) << j.dump(2); }
}  // namespace

TEST_CASE("manifest checksum: an edited value is damage, naming the file, no checksum reads", "[io][checkpoint]") {
  const auto dir = (fs::temp_directory_path() / ("odc_manifest_sum_" + std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  save(dir, 2);
  save(dir, 4);
  const fs::path manifest = fs::path(dir) / "step-00000004" / "manifest.json";
  auto json = load_json(manifest);
  REQUIRE(json[io::kManifestChecksumKey] == io::manifest_checksum(json));
  REQUIRE(io::read_manifest(manifest.parent_path().string())["sampler"]["position"] == 40);

  SECTION("one digit of sampler.position") {
    json["sampler"]["position"] = 41;
    store_json(manifest, json);
    REQUIRE_THROWS_WITH(io::read_manifest(manifest.parent_path().string()),
                        Catch::Contains("manifest.json' is damaged") && Catch::Contains("edited or corrupted"));
    const auto scan = io::scan_checkpoints(dir);
    REQUIRE(scan.size() == 2);
    CHECK(scan[0].damage.empty());
    CHECK_THAT(scan[1].damage, Catch::Contains("checksum"));
    CHECK(io::previous_checkpoint(manifest.parent_path().string()) == dir + "/step-00000002");
    CHECK_THAT(io::previous_checkpoint_hint(manifest.parent_path().string()),
               Catch::Contains("--set checkpoint.resume=" + dir + "/step-00000002"));
  }
  SECTION("world_size against the rank list (checksum removed: an old manifest)") {
    json.erase(io::kManifestChecksumKey);
    store_json(manifest, json);
    REQUIRE_FALSE(io::has_manifest_checksum(io::read_manifest(manifest.parent_path().string())));
    json["world_size"] = 2;
    store_json(manifest, json);
    REQUIRE_THROWS_WITH(io::read_manifest(manifest.parent_path().string()),
                        Catch::Contains("'ranks' must list every one of the 2 ranks"));
  }
  SECTION("a step directory without its manifest is damaged, and a commit of that step moves it aside") {
    fs::remove(manifest);
    const auto scan = io::scan_checkpoints(dir);
    CHECK_THAT(scan.back().damage, Catch::Contains("has no manifest.json"));
    save(dir, 4);
    CHECK(fs::exists(fs::path(dir) / "retired" / "replaced-step-00000004" / "step-00000004" / "rank-00000.safetensors"));
    CHECK(io::read_manifest(dir + "/step-00000004")["step"] == 4);
  }
  fs::remove_all(dir);
}
