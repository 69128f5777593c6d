#pragma once
// The memory plan's key (train.memory_budget_gib), declared once (core/key.h), with the bounds of its
// range. Its user is train/plan, but RunSettings (this room) takes its default from it.
#include <cstdint>
#include <string>
#include "odc/core/key.h"

namespace odc::train {

// The largest train.memory_budget_gib (its range): 1 PiB per rank is beyond any machine and
// leaves the plan's byte counts (int64, 8 EiB at most) far from overflowing; a larger budget is
// taken as this one.
constexpr double kMaxMemoryBudgetGib = 1048576.0;
// The smallest positive train.memory_budget_gib (1 MiB; run_settings refuses a smaller one): below
// it the budget's bytes round towards 0, which means "unknown" and checks nothing.
constexpr double kMinMemoryBudgetGib = 1.0 / 1024.0;

}  // namespace odc::train

namespace odc::keys {

using train::kMaxMemoryBudgetGib;

inline const Key<double> train_memory_budget_gib{"train.memory_budget_gib", number("0"), "one rank's memory budget for the memory plan (odc-train --plan-memory): a run whose plan exceeds it "
              "is refused before training, and data.max_tokens_per_microbatch: auto fills it; 0 = what the "
              "device has (a GPU's memory, the host's available memory) over the ranks sharing it, less 5%; else at "
              "least 0.0009765625 (1 MiB) and at most 1048576 (1 PiB)", Range::at_least(0).and_at_most(kMaxMemoryBudgetGib)};

}  // namespace odc::keys
