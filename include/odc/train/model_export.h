#pragma once
// The end-of-run export of the trained model as a Hugging Face directory (checkpoint.export_hf):
// rank 0 writes config.json and the safetensors files while every rank contributes its shard of
// one unit at a time, in unit order (collective).
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

// Writes checkpoint.export_hf (tokenizer files are copied from model.checkpoint, if any).
void export_hf(const Config& config, distributed::HostGroup& group, const distributed::ShardStore& store,
               const model::LlamaConfig& model_config, const ModelSource& source);

}  // namespace odc::train
