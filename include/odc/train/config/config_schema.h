#pragma once
// The trainer's tunables: every key of odc-train's YAML, each declared once (core/key.h) beside its
// user (model/model_keys.h, data/data_keys.h, distributed/*/..._keys.h, train/config/*_keys.h) and
// listed here in the schema's order. The defaults form the embedded demo job (a small LLaMA-style
// model on synthetic SFT data).
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "odc/backend/backend.h"
#include "odc/core/config.h"
#include "odc/distributed/comm/comm_factory.h"
#include "odc/model/llama_config.h"
#include "odc/model/model_keys.h"

namespace odc::train {

std::vector<TunableSpec> trainer_tunables();

// Loads the effective config: declared defaults < YAML file (none when empty) < environment <
// --set assignments. Required keys are not checked: call Config::validate() before training.
Config load_trainer_config(const std::string& config_file, const std::vector<std::string>& assignments);

// model.config as a LlamaConfig (strict: unknown fields are errors naming "model.config.X");
// model/model_keys.h, shared with odc-sim.
using model::model_config_from;
// The model a training run uses: model.checkpoint's config.json when set, else model.config.
model::LlamaConfig training_model_config(const Config& config);

// YAML -> JSON with scalar types inferred the way YAML 1.2 core schema reads them (model_keys.h).
using model::yaml_to_json;

}  // namespace odc::train
