#pragma once
// LlamaModel: hand-written forward and backward of a LLaMA-style decoder over packed sequences,
// fp32 on the CPU. No autograd graph: each unit saves exactly the activations its backward needs
// in buffers sized by the microbatch token count and reused across microbatches (capacity only
// grows to the largest microbatch seen).
//
// Training a microbatch:  forward units 0..L (acquire, compute, release), then the head unit does
// its forward, the weighted cross-entropy and its backward in row chunks (full logits are never
// held), then backward units L..0 with re-acquired weights, each unit's gradient pushed as soon as
// it is complete.
#include <cstdint>
#include <memory>
#include <vector>

#include "odc/core/trace.h"
#include "odc/model/batch.h"
#include "odc/model/llama_config.h"
#include "odc/model/param_io.h"
#include "odc/model/units.h"

namespace odc::model {

struct MicrobatchResult {
  double weighted_loss = 0.0;   // sum_t weight[t] * nll[t]
  double target_tokens = 0.0;   // number of positions with weight > 0
  double nll_sum = 0.0;         // sum of unweighted nll over those positions
};

class LlamaModel {
 public:
  explicit LlamaModel(const LlamaConfig& config);
  ~LlamaModel();
  LlamaModel(const LlamaModel&) = delete;
  LlamaModel& operator=(const LlamaModel&) = delete;

  const LlamaConfig& config() const { return config_; }
  const std::vector<UnitLayout>& units() const { return units_; }
  int num_units() const { return static_cast<int>(units_.size()); }
  int head_unit() const { return num_units() - 1; }

  // Forward, loss and backward of one microbatch; gradients go to `grads`, scaled by the batch's
  // loss weights (so summing over microbatches and ranks gives the minibatch gradient).
  MicrobatchResult train_microbatch(const PackedBatch& batch, ParamSource& params, GradSink& grads);

  // Forward only. If logits != nullptr it is resized to [tokens, vocab] and filled.
  // Returns the weighted loss statistics of the batch's targets.
  MicrobatchResult forward(const PackedBatch& batch, ParamSource& params, std::vector<float>* logits);

  // Records each unit's forward/backward compute as trace events (null: off). Weight gathers and
  // gradient hand-offs happen outside these events, so they time pure compute.
  void set_tracer(Tracer* tracer) { tracer_ = tracer; }

  // Bytes currently held by activation and scratch buffers (for memory-stability checks).
  std::int64_t activation_bytes() const;

 private:
  struct Activations;
  LlamaConfig config_;
  std::vector<UnitLayout> units_;
  std::vector<double> inv_freq_;
  std::unique_ptr<Activations> acts_;
  Tracer* tracer_ = nullptr;
};

}  // namespace odc::model
