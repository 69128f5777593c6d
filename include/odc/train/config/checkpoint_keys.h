#pragma once
// The checkpoint.* keys, declared once (core/key.h). Their user is train/checkpoint, but RunSettings
// (this room, the lowest of train) takes its defaults from them, so they are declared here.
#include <cstdint>
#include <string>
#include <limits>
#include "odc/core/key.h"

namespace odc::keys {

inline const Key<std::string> checkpoint_dir{"checkpoint.dir", std::string(), "directory of native checkpoints (step-N/: per-rank shards, optimizer state, data position); empty = "
              "none"};
inline const Key<std::int64_t> checkpoint_every{"checkpoint.every", 0, "save every N steps (0 = only at the end of the run)", Range::at_least(0)};
inline const Key<std::int64_t> checkpoint_keep{"checkpoint.keep", 3, "keep the newest K checkpoints of this run (0 = all)", Range::at_least(0).and_at_most(std::numeric_limits<int>::max())};
inline const Key<bool> checkpoint_save_best{"checkpoint.save_best", false, "an evaluation with the lowest eval loss so far on a step that has no checkpoint saves one there "
              "(false: it is logged, and checkpoint.dir/best.json keeps naming the best evaluated checkpoint)"};
inline const Key<bool> checkpoint_accept_manifest_without_checksum{"checkpoint.accept_manifest_without_checksum", false, "resume a checkpoint whose manifest has no manifest_checksum (written before manifests carried one, or "
              "with the field deleted), whose values cannot be verified; false refuses it, naming this key"};
inline const Key<std::string> checkpoint_resume{"checkpoint.resume", "auto", "auto = continue from the newest complete checkpoint in checkpoint.dir if there is one; never = a fresh "
              "run (checkpoint.dir must hold no checkpoints); or a checkpoint directory (step-N) to continue from: an "
              "earlier step of checkpoint.dir is a rollback, its later checkpoints move to checkpoint.dir/retired/"};
inline const Key<std::string> checkpoint_export_hf{"checkpoint.export_hf", std::string(), "at the end of the run, write the trained model as a Hugging Face directory here (config.json, "
              "safetensors, tokenizer files copied from model.checkpoint); empty = no export"};
inline const Key<std::string> checkpoint_export_dtype{"checkpoint.export_dtype", "auto", "dtype of the exported tensors; auto = model.checkpoint's dtype, else float32", {"auto", "float32", "bfloat16", "float16"}};
inline const Key<std::int64_t> checkpoint_export_shard_bytes{"checkpoint.export_shard_bytes", 5000000000, "largest safetensors file of the export before it is split into shards (model-0000K-of-0000N plus "
              "model.safetensors.index.json), each holding whole units (a larger unit gets one of its own); the "
              "ranks write the shards side by side (5000000000 = transformers' 5 GB)", Range::at_least(1)};

}  // namespace odc::keys
