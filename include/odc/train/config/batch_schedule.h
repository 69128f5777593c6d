#pragma once
// How big a run's steps are and how many it takes, from keys that can each say it two ways:
//   data.minibatch_size (per rank)  | data.global_batch_size (over all ranks)
//   train.steps                     | train.epochs (steps derived from the dataset's size)
//   train.warmup_steps              | train.warmup_ratio (of the run's steps)
// At most one key of each pair may be set (neither: 4 sequences per rank, 200 steps, 20 warmup
// steps, the defaults from before the alternatives existed). Every function here checks that,
// so a config built in code (tests) gets the same errors as one loaded from a file.
#include <cstdint>
#include <string>

#include "odc/core/config.h"
#include "odc/data/planner.h"
#include "odc/optim/lr_schedule.h"

namespace odc::train {

// odc::Error naming both keys, their values and where each was set, when both keys of a pair are.
void check_exclusive_keys(const Config& config);

// Sequences per optimizer step over `world_size` ranks: data.global_batch_size, or
// data.minibatch_size x world_size. `how` (if given) receives how it was derived, e.g.
// "data.minibatch_size 4 x 2 ranks".
std::int64_t global_batch_size(const Config& config, int world_size, std::string* how = nullptr);

// odc::Error when `balance` cannot split `global` sequences over `world_size` ranks: lb_micro and
// lb_mini_equal give every rank the same count, so they need a multiple of the world size. The
// other balances split any count (ranks then run different numbers of sequences; the collective
// comm pads the ranks with fewer microbatches with empty ones, as it does for any uneven plan).
void check_batch_split(std::int64_t global, int world_size, data::Balance balance, const std::string& how);

struct RunLength {
  std::int64_t steps = 0;                // the run's optimizer steps (the schedule's total)
  std::int64_t epochs = 0;               // train.epochs; 0 when the run is given in steps
  std::int64_t steps_per_epoch = 0;      // epochs: ceil(dataset / global batch)
  std::int64_t last_step_sequences = 0;  // epochs: sequences of each epoch's last step
};

// The run's length over a dataset of `dataset_size` sequences and steps of `global_batch`:
// train.steps, or train.epochs x ceil(dataset_size / global_batch), where each epoch's last step
// trains the epoch's remainder (dataset_size mod global_batch sequences, when not 0).
RunLength run_length(const Config& config, std::int64_t dataset_size, std::int64_t global_batch);

// The learning-rate schedule of a run of `total_steps` steps: train.lr, min_lr, schedule, the
// warmup (train.warmup_steps, or train.warmup_ratio x total_steps rounded to the nearest step) and
// wsd's decay (train.decay_ratio x total_steps, rounded likewise).
optim::LrSchedule lr_schedule(const Config& config, std::int64_t total_steps);

// What --dump-config adds for `world_size` ranks: comment lines ("# ...") with the resolved global
// batch, steps and warmup (a run given in epochs resolves its steps at start-up, from the data).
std::string resolved_summary(const Config& config, int world_size);

}  // namespace odc::train
