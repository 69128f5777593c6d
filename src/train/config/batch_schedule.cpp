// The run's batch, length and learning-rate schedule from the keys that give each two ways.
#include "odc/train/config/batch_schedule.h"

#include <cmath>

#include <fmt/format.h>

#include "odc/core/checked_math.h"
#include "odc/core/error.h"
#include "odc/data/data_keys.h"
#include "odc/train/config/train_keys.h"

namespace odc::train {

namespace {

constexpr std::int64_t kDefaultMinibatchSize = 4;
constexpr std::int64_t kDefaultSteps = 200;
constexpr std::int64_t kDefaultWarmupSteps = 20;

struct KeyPair {
  const char* first;
  const char* second;
};
constexpr KeyPair kExclusive[] = {
    {"data.minibatch_size", "data.global_batch_size"},
    {"train.steps", "train.epochs"},
    {"train.warmup_steps", "train.warmup_ratio"},
};

std::string value_text(const Config& config, const std::string& path) {
  for (const auto& spec : config.specs()) {
    if (spec.path != path) continue;
    if (spec.kind == ValueKind::integer) return std::to_string(config.get_int(path));
    return fmt::format("{}", config.get_double(path));
  }
  return "?";
}

// ratio x total, rounded to the nearest step (0.3 x 10 is 3, not 4 from a product of 3.0000000000000004).
std::int64_t steps_of(double ratio, std::int64_t total) {
  return std::llround(ratio * static_cast<double>(total));
}

std::string plural(std::int64_t n, const char* word) { return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s"); }

}  // namespace

void check_exclusive_keys(const Config& config) {
  for (const auto& [first, second] : kExclusive) {
    if (!config.has(first) || !config.has(second)) continue;
    fail("{} ({}, from {}) and {} ({}, from {}) are both set, but they say the same thing two ways: set one of "
         "them (a value from a file can be unset with --set {}=)",
         first, value_text(config, first), config.source_of(first), second, value_text(config, second),
         config.source_of(second), first);
  }
}

std::int64_t global_batch_size(const Config& config, int world_size, std::string* how) {
  check_exclusive_keys(config);
  if (keys::data_global_batch_size.is_set(config)) {
    if (how != nullptr) *how = "data.global_batch_size";
    return keys::data_global_batch_size.read(config);
  }
  const bool given = keys::data_minibatch_size.is_set(config);
  const std::int64_t per_rank = given ? keys::data_minibatch_size.read(config) : kDefaultMinibatchSize;
  if (how != nullptr) {
    *how = fmt::format("data.minibatch_size {}{} x {}", per_rank, given ? "" : " (the default)",
                       plural(world_size, "rank"));
  }
  const auto global = product_within_int64(per_rank, world_size);
  if (!global) {
    fail("data.minibatch_size {} (from {}) x {} is beyond the largest count of sequences (2^63 - 1): on {} "
         "data.minibatch_size must be <= {}",
         per_rank, keys::data_minibatch_size.source(config), plural(world_size, "rank"), plural(world_size, "rank"),
         largest_factor_within_int64(world_size));
  }
  return *global;
}

void check_batch_split(std::int64_t global, int world_size, data::Balance balance, const std::string& how) {
  if (global % world_size == 0) return;
  if (balance == data::Balance::lb_mini_equal) {
    fail("the global batch of {} sequences ({}) does not divide over {}: data.balance lb_mini_equal gives every rank "
         "the same number of sequences; use a multiple of {} or data.balance lb_mini, which lets ranks run different "
         "numbers",
         global, how, plural(world_size, "rank"), world_size);
  }
  if (balance != data::Balance::lb_micro) return;
  fail("the global batch of {} sequences ({}) does not divide over {}: data.balance lb_micro (also what auto means "
       "with train.comm collective) gives every rank the same number of sequences; use a multiple of {} or "
       "data.balance local_sort (or lb_mini with train.comm odc), which let ranks run different numbers",
       global, how, plural(world_size, "rank"), world_size);
}

RunLength run_length(const Config& config, std::int64_t dataset_size, std::int64_t global_batch) {
  check_exclusive_keys(config);
  ODC_CHECK(dataset_size > 0 && global_batch > 0, "dataset of {} sequences, batch of {}", dataset_size, global_batch);
  RunLength length;
  if (!keys::train_epochs.is_set(config)) {
    length.steps = keys::train_steps.is_set(config) ? keys::train_steps.read(config) : kDefaultSteps;
    return length;
  }
  length.epochs = keys::train_epochs.read(config);
  length.steps_per_epoch = (dataset_size + global_batch - 1) / global_batch;
  const std::int64_t remainder = dataset_size % global_batch;
  length.last_step_sequences = remainder == 0 ? global_batch : remainder;
  const auto steps = product_within_int64(length.epochs, length.steps_per_epoch);
  if (!steps) {
    fail("train.epochs {} (from {}) x {} per epoch ({} sequences in global batches of {}) is beyond the largest "
         "count of steps (2^63 - 1): with this data and batch train.epochs must be <= {}",
         length.epochs, keys::train_epochs.source(config), plural(length.steps_per_epoch, "step"), dataset_size,
         global_batch, largest_factor_within_int64(length.steps_per_epoch));
  }
  length.steps = *steps;
  return length;
}

optim::LrSchedule lr_schedule(const Config& config, std::int64_t total_steps) {
  check_exclusive_keys(config);
  optim::LrSchedule schedule;
  schedule.lr = keys::train_lr.read(config);
  schedule.min_lr = keys::train_min_lr.read(config);
  schedule.kind = keys::train_schedule.read(config);
  schedule.total_steps = total_steps;
  if (keys::train_warmup_ratio.is_set(config)) {
    schedule.warmup_steps = steps_of(keys::train_warmup_ratio.read(config), total_steps);
  } else {
    schedule.warmup_steps = keys::train_warmup_steps.is_set(config) ? keys::train_warmup_steps.read(config) : kDefaultWarmupSteps;
  }
  schedule.decay_steps = steps_of(keys::train_decay_ratio.read(config), total_steps);
  schedule.warmup_from_zero = keys::train_warmup_start.read(config) == "zero";
  return schedule;
}

std::string resolved_summary(const Config& config, int world_size) {
  std::string how;
  const std::int64_t global = global_batch_size(config, world_size, &how);
  std::string out = fmt::format("# resolved for {}:\n", plural(world_size, "rank"));
  out += fmt::format("#   global batch: {} sequences per step ({}", global, how);
  out += global % world_size == 0 ? fmt::format(", {} per rank)\n", global / world_size)
                                  : fmt::format(", {:.3g} per rank on average)\n",
                                                static_cast<double>(global) / world_size);
  if (keys::train_epochs.is_set(config)) {
    out += fmt::format("#   steps: train.epochs {} x ceil(the dataset's sequences / {}), counted at start-up\n",
                       keys::train_epochs.read(config), global);
    if (keys::train_warmup_ratio.is_set(config)) {
      out += fmt::format("#   warmup: train.warmup_ratio {} of those steps\n", keys::train_warmup_ratio.read(config));
    }
  } else {
    const RunLength length = run_length(config, 1, 1);
    const optim::LrSchedule schedule = lr_schedule(config, length.steps);
    out += fmt::format("#   steps: {}{}\n", length.steps, keys::train_steps.is_set(config) ? "" : " (the default)");
    out += fmt::format("#   warmup: {}{}\n", plural(schedule.warmup_steps, "step"),
                       keys::train_warmup_ratio.is_set(config)
                           ? fmt::format(" (train.warmup_ratio {})", keys::train_warmup_ratio.read(config))
                           : (keys::train_warmup_steps.is_set(config) ? "" : " (the default)"));
  }
  if (keys::train_schedule.read(config) == "wsd") {
    out += fmt::format("#   wsd decay: the last train.decay_ratio {} of the steps\n", keys::train_decay_ratio.read(config));
  }
  return out;
}

}  // namespace odc::train
