#include "odc/io/checkpoint_format.h"

#include <filesystem>
#include <system_error>

#include "odc/core/error.h"
#include "odc/io/native_checkpoint.h"

namespace odc::io {

namespace {
namespace fs = std::filesystem;

bool holds_safetensors(const fs::path& dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().extension() == ".safetensors") return true;
  }
  return false;
}

}  // namespace

CheckpointFormat detect_checkpoint_format(const std::string& path) {
  std::error_code ec;
  const fs::path dir(path);
  if (path.empty() || !fs::is_directory(dir, ec)) return CheckpointFormat::other;
  if (fs::exists(dir / "manifest.json", ec)) return CheckpointFormat::native_step;
  if (fs::exists(dir / "config.json", ec) && holds_safetensors(dir)) return CheckpointFormat::hugging_face;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.is_directory(ec) && checkpoint_step(entry.path().filename().string()) >= 0 &&
        fs::exists(entry.path() / "manifest.json", ec)) {
      return CheckpointFormat::native_dir;
    }
  }
  return CheckpointFormat::other;
}

void refuse_native_where_hf_expected(const std::string& path, const std::string& what) {
  switch (detect_checkpoint_format(path)) {
    case CheckpointFormat::native_step:
      fail("{} '{}' is a native checkpoint step directory (manifest.json + rank shards), not a Hugging Face model "
           "directory (config.json + *.safetensors): convert it with odc-ckpt export --from {} --out DIR and use DIR, "
           "or resume training from it with checkpoint.resume: {}", what, path, path, path);
    case CheckpointFormat::native_dir:
      fail("{} '{}' is a native checkpoint directory (checkpoint.dir with step-N checkpoints), not a Hugging Face "
           "model directory (config.json + *.safetensors): convert its newest step with odc-ckpt export --from {} "
           "--out DIR and use DIR", what, path, path);
    default:
      return;
  }
}

void refuse_hf_where_native_expected(const std::string& path, const std::string& what) {
  if (detect_checkpoint_format(path) != CheckpointFormat::hugging_face) return;
  fail("{} '{}' is a Hugging Face model directory (config.json + *.safetensors), not a native checkpoint "
       "(a step-N directory with manifest.json): fine-tune from it with model.checkpoint: {}, or convert it with "
       "odc-ckpt import --from {} --out DIR --world-size N", what, path, path, path);
}

}  // namespace odc::io
