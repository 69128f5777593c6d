#include "odc/train/checkpoint_convert.h"

#include <filesystem>
#include <vector>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "odc/core/error.h"
#include "odc/distributed/shard/shard_layout.h"
#include "odc/io/checkpoint_format.h"
#include "odc/io/directory_lock.h"
#include "odc/io/hf_checkpoint.h"
#include "odc/io/native_checkpoint.h"
#include "odc/io/native_reshard.h"
#include "odc/io/safetensors.h"
#include "odc/model/units.h"
#include "odc/train/checkpointing.h"

namespace odc::train {

namespace {
namespace fs = std::filesystem;

// `from` is a step-N directory, or a checkpoint.dir: its newest complete step (the step a user
// names by number may have been pruned by checkpoint.keep by the time the run ends).
std::string resolve_step_directory(const std::string& from) {
  io::refuse_hf_where_native_expected(from, "--from");
  if (fs::exists(fs::path(from) / "manifest.json") || !fs::is_directory(from)) return from;
  if (const auto latest = io::latest_checkpoint(from)) return *latest;
  return from;  // read_manifest names what is missing
}

// The tokenizer of an export that neither names one nor replaces an HF directory: the files of the
// Hugging Face directory the run started from (model.checkpoint in the manifest's config), when it
// is still there and holds a tokenizer.json. Empty otherwise.
std::string run_tokenizer_directory(const TrainingManifest& manifest, const std::string& out_dir) {
  if (fs::exists(fs::path(out_dir) / "config.json") || manifest.config.empty()) return {};
  try {
    const YAML::Node model = YAML::Load(manifest.config)["model"];
    const std::string base = model && model["checkpoint"] ? model["checkpoint"].as<std::string>() : std::string();
    if (!base.empty() && fs::exists(fs::path(base) / "tokenizer.json")) return base;
  } catch (const YAML::Exception&) {
    // A config that does not parse only loses this default; the weights are what matters.
  }
  return {};
}
}  // namespace

std::int64_t export_native_to_hf(const std::string& native_from, const std::string& out_dir, DType dtype,
                                 const std::string& architecture, const std::string& copy_from) {
  const std::string native_checkpoint = resolve_step_directory(native_from);
  const nlohmann::json json = io::read_manifest(native_checkpoint);
  const TrainingManifest manifest = TrainingManifest::from_json(json, native_checkpoint);
  if (manifest.model_config.is_null()) fail("checkpoint '{}': the manifest holds no model_config", native_checkpoint);
  const auto config = model::LlamaConfig::from_json(manifest.model_config, native_checkpoint + "/manifest.json", false);
  const int world = manifest.world_size;
  const auto units = model::build_unit_layouts(config);
  const distributed::ShardLayout layout(units, world, 0);
  // Each rank's masters, read whole (checksums verified): the model's size in fp32, per rank a shard.
  std::vector<std::vector<float>> masters(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) {
    const auto owned = static_cast<std::size_t>(layout.owned_elements());
    auto& mine = masters[static_cast<std::size_t>(r)];
    mine.resize(owned);
    std::vector<float> m(owned), v(owned);
    io::read_rank_shards(native_checkpoint, json, r, {mine, m, v});
  }
  const std::string arch = !architecture.empty() ? architecture : io::default_hf_architecture(config);
  const std::string copy_from_dir = !copy_from.empty() ? copy_from : run_tokenizer_directory(manifest, out_dir);
  io::write_hf_checkpoint(out_dir, config, arch, dtype, [&](int unit, float* out) {
    const std::int64_t shard = layout.unit(unit).shard;
    const std::int64_t numel = layout.unit(unit).numel;
    const std::int64_t offset = layout.owned_offset(unit);
    for (int r = 0; r < world; ++r) {
      const std::int64_t begin = r * shard;
      const std::int64_t count = std::min(shard, numel - begin);
      if (count <= 0) break;  // the rest is padding
      const float* src = masters[static_cast<std::size_t>(r)].data() + offset;
      std::copy(src, src + count, out + begin);
    }
  }, 5'000'000'000, copy_from_dir);
  return manifest.step;
}

namespace {

// A directory written by import or reshard (locked by the caller: no job may be using it) must
// not hold a run already.
void check_no_checkpoints(const std::string& dir, const char* command) {
  const auto existing = io::list_checkpoints(dir);
  if (!existing.empty()) {
    fail("odc-ckpt {}: '{}' already holds {} checkpoint(s) (the newest: {}): a checkpoint directory belongs to one "
         "run; write into a new or empty directory", command, dir, existing.size(), existing.back().path);
  }
}
}  // namespace

std::string import_hf_to_native(const std::string& hf_dir, const std::string& native_dir, int world_size) {
  if (world_size < 1) fail("import needs a world size >= 1, found {}", world_size);
  const io::DirectoryLock lock(native_dir, io::this_process(""));
  check_no_checkpoints(native_dir, "import");
  const io::HfCheckpoint checkpoint(hf_dir);
  for (int r = 0; r < world_size; ++r) {
    const distributed::ShardLayout layout(checkpoint.units(), world_size, r);
    const auto owned = static_cast<std::size_t>(layout.owned_elements());
    std::vector<float> masters(owned), zeros(owned, 0.0f);
    for (int u = 0; u < layout.num_units(); ++u) {
      checkpoint.read_unit_range(u, layout.shard_begin(u, r), layout.unit(u).shard, masters.data() + layout.owned_offset(u));
    }
    io::write_rank_shards(io::staging_path(native_dir, 0), r, {masters, zeros, zeros});
  }
  TrainingManifest manifest;
  manifest.comm = "any";
  manifest.imported_from = hf_dir;
  manifest.model_config = checkpoint.config().to_json();
  manifest.source_architecture = checkpoint.architecture();
  manifest.source_dtype = std::string(dtype_name(checkpoint.dtype()));
  return io::commit_checkpoint(native_dir, 0, world_size, manifest.to_json(), 0);
}

std::string reshard_native(const std::string& checkpoint, const std::string& out_dir, int world_size) {
  if (world_size < 1) fail("reshard needs a world size >= 1, found {}", world_size);
  io::refuse_hf_where_native_expected(checkpoint, "--from");
  nlohmann::json json = io::read_manifest(checkpoint);
  const TrainingManifest manifest = TrainingManifest::from_json(json, checkpoint);
  if (manifest.model_config.is_null()) fail("checkpoint '{}': the manifest holds no model_config", checkpoint);
  const auto config = model::LlamaConfig::from_json(manifest.model_config, checkpoint + "/manifest.json", false);
  const auto units = model::build_unit_layouts(config);
  for (const auto& unit : units) {
    const std::int64_t shard = (unit.numel + world_size - 1) / world_size;
    if (shard * (world_size - 1) >= unit.numel) {
      fail("world size {} is too large for unit '{}' ({} parameters): some ranks would own only padding", world_size,
           unit.name, unit.numel);
    }
  }
  std::error_code ec;
  const fs::path source_dir = fs::weakly_canonical(fs::absolute(checkpoint), ec).parent_path();
  if (fs::exists(out_dir) && fs::equivalent(source_dir, out_dir, ec)) {
    fail("odc-ckpt reshard: OUT '{}' is the directory of '{}': write the resharded checkpoint into another directory "
         "(its step-{} would replace the one it is made from)", out_dir, checkpoint, manifest.step);
  }
  const io::DirectoryLock lock(out_dir, io::this_process(manifest.identity.run_id));
  check_no_checkpoints(out_dir, "reshard");
  json["resharded_from"] = {{"path", fs::weakly_canonical(fs::absolute(checkpoint), ec).string()},
                            {"world_size", manifest.world_size}};
  return io::write_resharded_checkpoint(checkpoint, units, world_size, out_dir, std::move(json));
}

}  // namespace odc::train
