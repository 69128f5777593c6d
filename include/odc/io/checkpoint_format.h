#pragma once
// Which of the two checkpoint formats a directory holds, so that a loader given the other one says
// what it is and how to convert it instead of naming a file that is missing: a Hugging Face model
// directory (config.json + *.safetensors: model.checkpoint, odc-eval/odc-generate --model,
// odc-ckpt import --from) or a native checkpoint (docs/checkpoints.md: a step-N directory with
// manifest.json and rank shards, or a checkpoint.dir holding step-N directories: checkpoint.resume,
// odc-ckpt export/reshard --from).
#include <string>

namespace odc::io {

enum class CheckpointFormat { other, hugging_face, native_step, native_dir };

CheckpointFormat detect_checkpoint_format(const std::string& path);

// Where a Hugging Face directory is expected (`what`: "HF checkpoint", "--model"): odc::Error when
// `path` is a native checkpoint, naming it and the odc-ckpt export command; nothing otherwise.
void refuse_native_where_hf_expected(const std::string& path, const std::string& what);

// Where a native checkpoint is expected (`what`: "checkpoint.resume", "odc-ckpt export --from"):
// odc::Error when `path` is a Hugging Face model directory, naming model.checkpoint and odc-ckpt
// import; nothing otherwise.
void refuse_hf_where_native_expected(const std::string& path, const std::string& what);

}  // namespace odc::io
