#pragma once
// What odc-train shows of a run's plan before it runs: --plan-memory's table, verdict and step-time
// estimate, and --dump-config's comment lines. Over the memory plan (memory_plan.h) and the
// step-time estimate beside it (step_estimate.h).
#include <string>

#include "odc/core/config.h"
#include "odc/train/plan/step_estimate.h"

namespace odc::train {

// odc-train --plan-memory: prints the plan of one of `world` ranks (the table, the budget and the
// verdict on stdout, the step-time estimate at the plan's shape (train/plan/step_estimate.h, its rates
// from `estimate`), then the plan as one JSON line with the estimate as "step_estimate") and
// returns whether it fits. The budget is train.memory_budget_gib, else (model.device cpu) this
// host's available memory over `ranks_on_host`; a GPU's memory is only known on a GPU machine, so
// a GPU plan without train.memory_budget_gib has no verdict (and auto is an error).
bool print_memory_plan(const Config& config, int world, bool launched_with_mpi, int ranks_on_host,
                       const EstimateOptions& estimate);
// The same plan as YAML comment lines for --dump-config: the verdict and one line per item.
std::string memory_plan_comment(const Config& config, int world, bool launched_with_mpi, int ranks_on_host);

}  // namespace odc::train
