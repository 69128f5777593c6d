#pragma once
// The weights a run starts from when it resumes no checkpoint: a Hugging Face checkpoint's
// (model.checkpoint, each rank reading only its shards) or the random initialization; and what the
// export keeps of the model's origin (ModelSource) after a resume.
#include <cstdint>
#include <string>
#include <vector>

#include "odc/distributed/shard/shard_store.h"
#include "odc/model/llama_config.h"
#include "odc/model/units.h"
#include "odc/train/checkpoint/model_export.h"
#include "odc/train/checkpoint/training_manifest.h"

namespace odc::train {

// The weights a run starts from before any training, this rank's shard of every unit of `layout`
// (host memory, layout.owned_elements() floats): model.checkpoint's (`base`, read straight into
// them), else the random initialization of model.seed (`seed`). The online RL loop's frozen
// reference policy (rl.kl_beta).
std::vector<float> starting_weights(const distributed::ShardLayout& layout, const std::vector<model::UnitLayout>& units,
                                    const model::LlamaConfig& model, std::uint64_t seed, const std::string& base);

// Every rank reads its shard of every unit of the Hugging Face checkpoint `base` into `store`'s
// masters (padding: zeros) and pushes them to the device; logs what it loaded. Returns its origin.
ModelSource load_base_weights(const std::string& base, distributed::ShardStore& store, const model::LlamaConfig& model);

// What the export keeps of the model's origin after a resume: the manifest's record of it, or for
// a checkpoint written before it was recorded, model.checkpoint's (when still there; headers only).
ModelSource resumed_source(const std::string& base, const TrainingManifest& manifest);

}  // namespace odc::train
