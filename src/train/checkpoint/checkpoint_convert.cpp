#include "odc/train/checkpoint/checkpoint_convert.h"

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "odc/core/error.h"
#include "odc/distributed/shard/shard_layout.h"
#include "odc/io/checkpoint_format.h"
#include "odc/io/directory_lock.h"
#include "odc/io/hf_checkpoint.h"
#include "odc/io/hf_export.h"
#include "odc/io/native_checkpoint.h"
#include "odc/io/native_reshard.h"
#include "odc/io/rank_masters_reader.h"
#include "odc/io/safetensors_writer.h"
#include "odc/model/units.h"
#include "odc/train/checkpoint/checkpointing.h"
#include "odc/train/checkpoint/model_export.h"

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

// odc-ckpt reads a manifest without its checksum only where --accept-manifest-without-checksum says
// so, as odc-train does with its key: a reshard would sign an edited value with a fresh checksum.
void check_manifest_checksum(const std::string& checkpoint, const nlohmann::json& manifest, bool accept,
                             std::string_view use, std::string_view note) {
  const auto previous = io::previous_checkpoint(checkpoint);
  io::check_manifest_checksum_present(
      checkpoint, manifest,
      {.accept = accept,
       .name = "--accept-manifest-without-checksum",
       .how = "--accept-manifest-without-checksum",
       .use = use,
       .note = note,
       .hint = previous ? fmt::format("; the previous good checkpoint next to it: {}", *previous) : std::string()});
}
}  // namespace

std::int64_t export_native_to_hf(const std::string& native_from, const std::string& out_dir, DType dtype,
                                 const std::string& architecture, const std::string& copy_from,
                                 std::int64_t max_shard_bytes, bool accept_manifest_without_checksum) {
  const std::string native_checkpoint = resolve_step_directory(native_from);
  const nlohmann::json json = io::read_manifest(native_checkpoint);
  check_manifest_checksum(native_checkpoint, json, accept_manifest_without_checksum, "export",
                          "the shards are still checked against the checksums it records");
  const TrainingManifest manifest = TrainingManifest::from_json(json, native_checkpoint);
  if (manifest.model_config.is_null()) fail("checkpoint '{}': the manifest holds no model_config", native_checkpoint);
  const auto config = model::LlamaConfig::from_json(manifest.model_config, native_checkpoint + "/manifest.json", false);
  const int world = manifest.world_size;
  const distributed::ShardLayout layout(model::build_unit_layouts(config), world, 0);
  const std::string arch = !architecture.empty() ? architecture : io::default_hf_architecture(config);
  const std::string copy_from_dir = !copy_from.empty() ? copy_from : run_tokenizer_directory(manifest, out_dir);
  io::HfDirectoryWriter directory(out_dir, config, arch, dtype, copy_from_dir);
  const io::HfExportLayout files = io::hf_export_layout(config, dtype, max_shard_bytes);
  // Every rank's masters are read front to back, a piece at a time, each piece written where it
  // belongs (unit u's elements [r * shard, (r + 1) * shard) are rank r's): a piece is all that is
  // held, whatever the model's size. The files' checksums are checked before the directory is
  // committed.
  std::vector<std::unique_ptr<io::RankMastersReader>> readers;
  for (int r = 0; r < world; ++r) {
    readers.push_back(std::make_unique<io::RankMastersReader>(native_checkpoint, json, r, layout.owned_elements()));
  }
  const std::size_t element_bytes = dtype_size(dtype);
  std::vector<float> values;
  std::vector<std::byte> bytes;
  for (std::size_t f = 0; f < files.num_files(); ++f) {
    io::SafetensorsPieceWriter file((fs::path(directory.staging()) / files.plan.files[f]).string(),
                                    files.file_tensors(f), io::hf_safetensors_metadata());
    const auto [first, end] = files.file_units(f);
    for (int u = first; u < end; ++u) {
      const std::int64_t shard = layout.unit(u).shard;
      const std::int64_t numel = layout.unit(u).numel;
      const std::int64_t step = export_piece_elements(shard, 1, dtype);
      for (int r = 0; r < world; ++r) {
        for (std::int64_t k = 0; k < shard; k += step) {
          values.resize(static_cast<std::size_t>(std::min(step, shard - k)));
          readers[static_cast<std::size_t>(r)]->read(values);  // padding too: the checksum covers it
          const std::int64_t begin = r * shard + k;
          const auto real = static_cast<std::size_t>(std::clamp<std::int64_t>(numel - begin, 0, std::ssize(values)));
          bytes.resize(real * element_bytes);
          io::encode_f32(std::span<const float>(values).first(real), dtype, bytes.data());
          file.write_at(files.unit_offset[static_cast<std::size_t>(u)] + static_cast<std::uint64_t>(begin) * element_bytes,
                        bytes.data(), bytes.size());
        }
      }
    }
    file.commit();
  }
  for (auto& reader : readers) reader->finish();
  directory.commit(files);
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

std::string reshard_native(const std::string& checkpoint, const std::string& out_dir, int world_size,
                           bool accept_manifest_without_checksum) {
  if (world_size < 1) fail("reshard needs a world size >= 1, found {}", world_size);
  io::refuse_hf_where_native_expected(checkpoint, "--from");
  nlohmann::json json = io::read_manifest(checkpoint);
  check_manifest_checksum(checkpoint, json, accept_manifest_without_checksum, "reshard",
                          "the resharded checkpoint's manifest gets a checksum of its values as they are");
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
