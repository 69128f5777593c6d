#pragma once
// LlamaModel: hand-written forward and backward of a LLaMA-style decoder over packed sequences,
// every op run by the backend chosen at construction (backend/backend.h). No autograd graph: each unit saves exactly the activations its backward needs
// in buffers sized by the microbatch token count and reused across microbatches (capacity only
// grows to the largest microbatch seen).
//
// Training a microbatch:  forward units 0..L (acquire, compute, release), then the head unit does
// its forward, the weighted cross-entropy and its backward in row chunks (full logits are never
// held), then backward units L..0 with re-acquired weights, each unit's gradient pushed as soon as
// it is complete. With recomputation (set_recompute) a layer's backward first recomputes its
// forward, in whole or in part, on those same re-acquired weights.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "odc/backend/backend.h"
#include "odc/core/trace.h"
#include "odc/kernels/policy_loss.h"
#include "odc/model/batch.h"
#include "odc/model/kv_cache.h"
#include "odc/model/llama_config.h"
#include "odc/model/param_io.h"
#include "odc/model/model_keys.h"
#include "odc/model/recompute.h"
#include "odc/model/units.h"

namespace odc::model {

struct MicrobatchResult {
  double weighted_loss = 0.0;   // sum_t weight[t] * nll[t]; under a policy objective its value
  double target_tokens = 0.0;   // number of positions with weight > 0
  double nll_sum = 0.0;         // sum of unweighted nll over those positions
  kernels::PolicyLossSums policy;  // under a policy objective (set_policy_objective): its sums
};

class LlamaModel {
 public:
  // The model owns its backend: its activations live in the backend's memory. The weights that
  // params.acquire hands out and the gradient buffers of grads.grad_buffer must be in that memory
  // too (fp32 unit buffers).
  LlamaModel(const LlamaConfig& config, std::unique_ptr<backend::Backend> backend);
  // The same on a backend it borrows: its owner keeps it alive longer than the model (a trainer
  // lends its backend to the model, the comm, the optimizer and the evaluator).
  LlamaModel(const LlamaConfig& config, backend::Backend& backend);
  ~LlamaModel();
  LlamaModel(const LlamaModel&) = delete;
  LlamaModel& operator=(const LlamaModel&) = delete;

  const LlamaConfig& config() const { return config_; }
  backend::Backend& backend() const { return *backend_; }
  const std::vector<UnitLayout>& units() const { return units_; }
  int num_units() const { return static_cast<int>(units_.size()); }
  int head_unit() const { return num_units() - 1; }

  // Forward, loss and backward of one microbatch; gradients go to `grads`, scaled by the batch's
  // loss weights (so summing over microbatches and ranks gives the minibatch gradient).
  MicrobatchResult train_microbatch(const PackedBatch& batch, ParamSource& params, GradSink& grads);

  // Forward only. If logits != nullptr it is resized to [tokens, vocab] and filled (on the host).
  // Returns the weighted loss statistics of the batch's targets.
  MicrobatchResult forward(const PackedBatch& batch, ParamSource& params, std::vector<float>* logits);

  // Incremental forward over a KV cache (inference; kv_cache.h): runs `tokens`, the next tokens of
  // the cache's sequence, at positions [cache.length(), cache.length() + tokens.size()), writes
  // their keys and values into the cache, and sets `logits` (host, [vocab]) to the prediction
  // after the last of them. A prompt is one call (prefill), each generated token one more; the
  // work per call is linear in the cached length. Units are acquired and released as in
  // forward(). odc::Error when the tokens do not fit the cache, an id is out of the vocabulary,
  // or the cache belongs to another backend or model shape.
  void forward_cached(std::span<const std::int32_t> tokens, KvCache& cache, ParamSource& params,
                      std::vector<float>& logits);
  // Many sequences at once (batched sampling): one new token per cache (caches[i] is sequence i's;
  // distinct), the GEMMs over all of them together and attention per sequence over its own cache;
  // `logits` [caches, vocab] gets each sequence's prediction. The same numbers as forward_cached
  // per sequence up to the GEMMs' summation order over rows.
  void forward_cached_batch(std::span<const std::int32_t> tokens, std::span<KvCache* const> caches,
                            ParamSource& params, std::vector<float>& logits);

  // Activation recomputation (recompute.h; none by default). Gradients and losses do not depend on
  // it; the activation memory and the backward's compute do.
  void set_recompute(Recompute mode) { recompute_ = mode; }
  // The objective train_microbatch trains: weighted cross-entropy (none, the default), or the
  // clipped policy-gradient objective of kernels/policy_loss.h, whose inputs every batch must then
  // carry (PackedBatch::append_policy); `entropy` adds the rows' softmax entropy to its sums.
  void set_policy_objective(std::optional<kernels::PolicyLossParams> params, bool entropy = true) {
    policy_ = params;
    policy_entropy_ = entropy;
  }
  Recompute recompute() const { return recompute_; }

  // How split microbatches (PackedBatch::context, context_split.h) exchange keys and values between
  // their group's members (null: none; a split batch is then an error). Borrowed.
  void set_context_exchange(ContextExchange* exchange) { exchange_ = exchange; }

  // Records each unit's forward/backward compute as trace events (null: off). Weight gathers and
  // gradient hand-offs happen outside these events, so they time pure compute.
  void set_tracer(Tracer* tracer) { tracer_ = tracer; }

  // Bytes currently held by activation and scratch buffers (for memory-stability checks).
  std::int64_t activation_bytes() const;

 private:
  struct Activations;
  // The backend owned (`owned`) or else borrowed.
  LlamaModel(const LlamaConfig& config, std::unique_ptr<backend::Backend> owned, backend::Backend* borrowed);
  // Checks the batch, uploads its index data and builds what every layer shares (acts_->context).
  void begin_microbatch(const PackedBatch& batch);
  // A split microbatch's part of it: the key segments and the exchange's pieces.
  void begin_split(const PackedBatch& batch);
  // forward_cached and forward_cached_batch: `rows` new tokens for each cache, sequence by sequence.
  void decode(std::span<const std::int32_t> tokens, std::span<KvCache* const> caches, std::int64_t rows,
              ParamSource& params, std::vector<float>& logits);
  LlamaConfig config_;
  std::unique_ptr<backend::Backend> owned_backend_;  // null when borrowed
  backend::Backend* backend_;  // owned_backend_ or the borrowed one; before acts_: the buffers release into its memory
  std::vector<UnitLayout> units_;
  std::vector<double> inv_freq_;
  std::unique_ptr<Activations> acts_;
  Tracer* tracer_ = nullptr;
  ContextExchange* exchange_ = nullptr;
  Recompute recompute_ = parse_recompute(keys::train_recompute.default_value());  // train.recompute
  std::optional<kernels::PolicyLossParams> policy_;
  bool policy_entropy_ = true;
};

}  // namespace odc::model
