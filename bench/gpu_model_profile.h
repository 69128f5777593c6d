#pragma once
// gpu_model_throughput --profile: one more training step under the op profiler
// (backend/op_profiler.h), as the document gpu_model_throughput writes (backend/op_profile.h).
#include <string>

#include "odc/backend/op_profile.h"
#include "odc/backend/op_profiler.h"
#include "odc/model/batch.h"
#include "odc/model/llama_model.h"
#include "odc/model/resident_weights.h"

namespace odc::bench {

// The classifier of the model's GEMM roles (the LLaMA classifier at its dimensions).
backend::GemmClassifier gemm_classifier(const model::LlamaConfig& config);

// A step (the timed steps' microbatch forward, loss and backward, then the trainer's gradient
// norm, Backend::sum_of_squares over every unit's gradients, which the timed steps leave out as
// the PyTorch peer does, and AdamW) with `profiler` recording, twice: the second is returned (the
// first warms the profiler's timeline). `profiler` is the model's backend. The step's wall seconds
// run from the first op's issue to the device's end of the last op; AdamW takes step numbers
// `adamw_step` and `adamw_step + 1`.
backend::ProfileDocument profile_step(model::LlamaModel& model, model::ResidentWeights& weights,
                                      backend::ProfilingBackend& profiler, const model::PackedBatch& batch,
                                      const std::string& shape, const std::string& attention, int adamw_step);

}  // namespace odc::bench
