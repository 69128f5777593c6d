#pragma once
// AdamW over the shards a rank owns, plus global-norm clipping. Weight decay applies only to the
// decaying segments of each shard (matrices; not norms, biases or padding).
#include <cstdint>

#include "odc/distributed/shard/shard_store.h"

namespace odc::optim {

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

// Clip coefficient as torch.nn.utils.clip_grad_norm_: min(1, max_norm / (norm + 1e-6));
// max_norm <= 0 disables clipping.
double clip_coefficient(double grad_norm, double max_norm);

class ShardedAdamW {
 public:
  explicit ShardedAdamW(AdamWConfig config) : config_(config) {}
  // One optimizer step on every owned shard; gradients are multiplied by grad_scale first.
  void step(distributed::ShardStore& store, double lr, double grad_scale);
  std::int64_t steps_taken() const { return step_; }
  void set_steps_taken(std::int64_t steps) { step_ = steps; }

 private:
  AdamWConfig config_;
  std::int64_t step_ = 0;
};

}  // namespace odc::optim
