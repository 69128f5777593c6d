#pragma once
// A model's attention window against the data it is given: the one check every place that reads or
// samples sequences for a model with a sliding window makes (training data, evaluation, inference,
// rollouts), with the message that names where the window came from.
#include <cstdint>
#include <string>

#include "odc/data/dataset.h"
#include "odc/model/llama_config.h"

namespace odc::data {

// Where model.attention_window came from, for messages: "sliding_window in CKPT/config.json" with
// model.checkpoint, else "model.config.attention_window, from SOURCE" (model.config's origin).
std::string attention_window_origin(const std::string& checkpoint, const std::string& model_config_origin);

// Attention here spans whole sequences, which is the original model's sliding-window attention on
// sequences of at most model.attention_window tokens. When a window is set, the first of the
// first `count` sequences of `dataset` that is longer is an odc::Error naming its record, length,
// the window and `origin`, saying what it would break (`consequence`) and what to do (`remedy`).
void check_attention_window(const data::TokenDataset& dataset, std::int64_t count, const model::LlamaConfig& model,
                            const std::string& origin, const std::string& consequence, const std::string& remedy);

}  // namespace odc::data
