#pragma once
// Conversions between native checkpoints (per-rank shards, io/native_checkpoint.h) and Hugging
// Face directories (io/hf_checkpoint.h), for odc-ckpt export / import.
#include <cstdint>
#include <string>

#include "odc/core/dtype.h"

namespace odc::train {

// Writes the model of a native checkpoint (any world size) as a Hugging Face directory, streamed:
// every rank's masters are read a piece at a time and each piece written in place (the files of
// io/hf_export.h, shards of at most `max_shard_bytes`), so memory holds a piece, never the model.
// `architecture` empty = the model's default
// (io::default_hf_architecture: Qwen3 with q/k norms, Qwen2 with attention biases, Mistral with an
// attention_window, else Llama).
// `native_checkpoint` is a step-N directory or a checkpoint.dir (then its newest complete step).
// `copy_from_dir` supplies the tokenizer files; empty: those of the HF directory it replaces, else
// those of the run's model.checkpoint (from the manifest's config) when still there. Returns the
// step of the checkpoint. A manifest without its checksum is refused unless
// `accept_manifest_without_checksum` (odc-ckpt's --accept-manifest-without-checksum; then a warning).
std::int64_t export_native_to_hf(const std::string& native_checkpoint, const std::string& out_dir, DType dtype,
                                 const std::string& architecture, const std::string& copy_from_dir,
                                 std::int64_t max_shard_bytes = 5'000'000'000,
                                 bool accept_manifest_without_checksum = false);

// Writes a native checkpoint for `world_size` ranks from a Hugging Face directory: step 0, zero
// AdamW moments, no data position (a run resuming from it starts its data from the beginning).
// Returns the checkpoint's path (native_dir/step-00000000).
std::string import_hf_to_native(const std::string& hf_dir, const std::string& native_dir, int world_size);

// Writes the native checkpoint `checkpoint` (any world size) for `world_size` ranks into the
// checkpoint directory `out_dir` (a new or empty one, locked while written; not the directory of
// `checkpoint`): the same step, masters and AdamW moments re-sliced (io/native_reshard.h), the
// manifest kept — run, lineage, data position — with "resharded_from" added. A run with
// checkpoint.dir=out_dir on `world_size` ranks resumes it exactly (the trainer also reshards on
// resume by itself). Returns the new checkpoint's path. A manifest without its checksum is refused
// unless `accept_manifest_without_checksum` (the new manifest's checksum would vouch for values
// nothing checked).
std::string reshard_native(const std::string& checkpoint, const std::string& out_dir, int world_size,
                           bool accept_manifest_without_checksum = false);

}  // namespace odc::train
