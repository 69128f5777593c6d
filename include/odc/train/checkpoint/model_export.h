#pragma once
// The end-of-run export of the trained model as a Hugging Face directory (checkpoint.export_hf),
// streamed (collective): the safetensors files (of at most checkpoint.export_shard_bytes, whole
// units each: io/hf_export.h) are written by the ranks in turn, file k by rank k mod ranks; each
// unit of a file is gathered to its writer in pieces of at most kExportGatherBytes (every rank's
// part encoded in the export dtype by that rank), and each piece is written where it belongs, so
// no rank holds more than one piece beyond its training state. Rank 0 makes the staging
// directory, with config.json and the tokenizer files, and commits it once every file is written.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "odc/core/config.h"
#include "odc/core/dtype.h"
#include "odc/distributed/group/host_group.h"
#include "odc/distributed/shard/shard_store.h"
#include "odc/model/llama_config.h"

namespace odc::train {

// Where the model came from, when training started from a Hugging Face checkpoint: its
// architecture and dtype are what the export keeps by default (checkpoint.export_dtype: auto).
struct ModelSource {
  std::string architecture;
  std::optional<DType> dtype;
};

// Refuses a checkpoint.export_hf that names model.checkpoint's directory (under any spelling: a
// trailing slash, a relative path, a symlink): the export would replace the base model.
void check_export_target(const Config& config);

// What one gather of the export carries in all (the writer's receive buffer): 16 MiB, few enough
// gathers for their latency not to matter (a 16 GB bf16 model is a thousand) and small beside
// any model's training state. The memory plan counts it (memory_plan.h).
inline constexpr std::size_t kExportGatherBytes = std::size_t{16} << 20;
// The elements of each rank's part of one piece of a unit whose shards hold `shard` elements.
std::int64_t export_piece_elements(std::int64_t shard, int ranks, DType dtype);

// Writes checkpoint.export_hf (tokenizer files are copied from model.checkpoint, if any). Every
// rank must see the directory's file system (as for native checkpoints); an error on any rank
// fails on every rank, and the directory is then left as it was.
void export_hf(const Config& config, distributed::HostGroup& group, const distributed::ShardStore& store,
               const model::LlamaConfig& model_config, const ModelSource& source);

}  // namespace odc::train
