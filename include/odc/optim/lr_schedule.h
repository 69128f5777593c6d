#pragma once
// Learning-rate schedule. Steps count from 0; step s trains with at(s). Warmup first: linear from
// lr/warmup_steps at step 0 to lr at step warmup_steps-1, lr * (s + 1) / warmup; or, with
// warmup_from_zero, as Hugging Face transformers' schedulers: lr * s / warmup, so step 0 trains at
// lr 0 (its gradient still enters AdamW's moments) and lr is first reached after warmup. After
// it, by `kind`:
//   cosine       min_lr + (lr - min_lr) * (1 + cos(pi * p)) / 2,  p = (s - warmup) / (total - warmup)
//   linear       lr - (lr - min_lr) * p                            (same p)
//   constant     lr
//   wsd          warmup-stable-decay: lr until the last `decay_steps` steps, then a LINEAR decay
//                lr - (lr - min_lr) * (s - d) / (total - d),       d = max(warmup, total - decay_steps)
//   inverse_sqrt lr * sqrt(max(warmup, 1) / (s + 1)), floored at min_lr (fairseq's schedule with
//                update number s + 1: exactly lr at the end of warmup, lr / sqrt(s + 1) without it);
//                it does not depend on total_steps
// The decaying schedules reach min_lr at step total_steps, the step after the last one trained
// (p clamps to [0, 1]).
#include <cstdint>
#include <string>

namespace odc::optim {

struct LrSchedule {
  double lr = 3e-4;
  double min_lr = 0.0;
  std::int64_t warmup_steps = 0;
  std::int64_t total_steps = 1;
  std::string kind = "cosine";  // cosine | linear | constant | wsd | inverse_sqrt
  std::int64_t decay_steps = 0;  // wsd: steps of the final decay
  bool warmup_from_zero = false;  // train.warmup_start: zero

  double at(std::int64_t step) const;
};

}  // namespace odc::optim
