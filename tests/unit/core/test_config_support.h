#pragma once
// The schema the config tests share: a small table shaped like the trainer's.
#include <vector>

#include "odc/core/config.h"

namespace odc::test {

using odc::TunableSpec;
using odc::ValueKind;

// A small table shaped like the trainer's: optional keys, a required one, choices, a map tunable.
inline std::vector<TunableSpec> test_specs() {
  return {
      {"model.checkpoint", ValueKind::string, "", "HF checkpoint directory", {}, false},
      {"model.config", ValueKind::map, "", "HF config.json fields", {}, false},
      {"model.dtype", ValueKind::string, "float32", "compute dtype", {"float32", "bfloat16"}, false},
      {"data.train", ValueKind::string, "", "path to the training data", {}, true},
      {"data.minibatch_size", ValueKind::integer, "4", "sequences per rank per step", {}, false},
      {"train.comm", ValueKind::string, "odc", "communication scheme", {"odc", "collective"}, false},
      {"train.lr", ValueKind::number, "3e-4", "peak learning rate", {}, false},
      {"train.steps", ValueKind::integer, "100", "optimizer steps", {}, false},
      {"train.shuffle", ValueKind::boolean, "true", "shuffle the data", {}, false},
      {"train.metrics_file", ValueKind::string, "", "JSONL metrics output", {}, false},
      {"comm.chunk_bytes", ValueKind::integer, "1048576", "bytes per transfer chunk", {}, false},
  };
}

}  // namespace odc::test
