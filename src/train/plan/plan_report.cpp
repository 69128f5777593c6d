#include "odc/train/plan/plan_report.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "odc/core/error.h"
#include "odc/core/planned_memory.h"
#include "odc/core/process_stats.h"
#include "odc/distributed/comm/comm_options.h"
#include "odc/train/config/config_schema.h"
#include "odc/train/config/run_settings.h"
#include "odc/train/plan/memory_plan.h"

namespace odc::train {

namespace {

// The plan odc-train --plan-memory and --dump-config show, with its verdict line; nullopt when the
// cap depends on the data (data.max_tokens_per_microbatch 0).
struct ShownPlan {
  MemoryPlan plan;
  std::string verdict;
  bool fits = true;
  std::int64_t budget = 0;
};

std::optional<ShownPlan> plan_to_show(const Config& config, int world, bool launched_with_mpi, int ranks_on_host) {
  const model::LlamaConfig model = training_model_config(config);
  // Planned for a run elsewhere: nothing is checked against this machine.
  const RunSettings settings = resolve_run_settings(config, false);
  const bool gpu = settings.model.device != "cpu";
  const std::int64_t capacity = gpu ? 0 : read_available_memory() / std::max(ranks_on_host, 1);
  // The hosts the shard group spans: a group without MPI is one host; the planned run's hosts are
  // its ranks over `ranks_on_host`.
  const int group_hosts = launched_with_mpi ? (world + std::max(ranks_on_host, 1) - 1) / std::max(ranks_on_host, 1) : 1;
  const int hosts = distributed::shard_group_hosts(settings.train.sharding, group_hosts);
  const RunMemory run = plan_run_memory(settings, model, world, capacity, ranks_on_host, launched_with_mpi, 0, hosts);
  MemoryInputs inputs = run.inputs;
  inputs.tokens = run.auto_token_cap > 0 ? run.auto_token_cap : settings.data.max_tokens_per_microbatch;
  if (inputs.tokens <= 0) return std::nullopt;
  ShownPlan shown{plan_memory(inputs), "", true, run.budget};
  if (run.budget <= 0) {
    shown.verdict = "no budget: set train.memory_budget_gib to check a GPU plan here";
  } else {
    shown.fits = shown.plan.peak_bytes() <= run.budget;
    shown.verdict = fmt::format("{}: {} of a budget of {} ({}){}", shown.fits ? "fits" : "does NOT fit",
                                mib_text(shown.plan.peak_bytes()), mib_text(run.budget), run.budget_origin,
                                run.auto_token_cap > 0 ? "; data.max_tokens_per_microbatch: auto" : "");
  }
  return shown;
}

}  // namespace

bool print_memory_plan(const Config& config, int world, bool launched_with_mpi, int ranks_on_host,
                       const EstimateOptions& estimate_options) {
  const auto shown = plan_to_show(config, world, launched_with_mpi, ranks_on_host);
  if (!shown) {
    fail("--plan-memory: data.max_tokens_per_microbatch is 0 (the longest sequence of the data): set the number of "
         "tokens to plan for (--set data.max_tokens_per_microbatch=N) or auto");
  }
  const StepEstimate estimate =
      plan_step_estimate(shown->plan.inputs, resolve_run_settings(config, false), estimate_options);
  nlohmann::json json = shown->plan.to_json();
  json["budget_bytes"] = shown->budget;
  json["fits"] = shown->fits;
  json["step_estimate"] = estimate.to_json();
  std::fputs(fmt::format("{}{}\n{}{}\n", shown->plan.table(), shown->verdict, estimate.text(), json.dump()).c_str(),
             stdout);
  return shown->fits;
}

std::string memory_plan_comment(const Config& config, int world, bool launched_with_mpi, int ranks_on_host) {
  std::optional<ShownPlan> shown;
  try {
    shown = plan_to_show(config, world, launched_with_mpi, ranks_on_host);
  } catch (const Error& e) {
    return fmt::format("# memory plan: {}\n", e.what());  // --dump-config shows the rest all the same
  }
  if (!shown) {
    return "# memory plan: data.max_tokens_per_microbatch 0 follows the data's longest sequence: odc-train "
           "--plan-memory --set data.max_tokens_per_microbatch=N shows the plan at N tokens\n";
  }
  std::string out = "# " + shown->verdict + "\n";
  for (const auto& item : shown->plan.items) {
    out += fmt::format("#   {:<32} {:>12}\n", item.name, mib_text(item.bytes));
  }
  return out;
}

}  // namespace odc::train
