// The schemas odc-train and odc-sim load: the data.* keys both read are one declaration
// (data::data_tunables), every default lies in its declared range, and the ranges that replace the
// tools' hand-written checks are the ones pinned here.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "odc/core/config.h"
#include "odc/data/data_config.h"
#include "odc/sim/sim_config.h"
#include "odc/train/config/config_schema.h"

namespace {

using Catch::Contains;

std::map<std::string, odc::TunableSpec> by_path(const std::vector<odc::TunableSpec>& specs) {
  std::map<std::string, odc::TunableSpec> out;
  for (const auto& spec : specs) out.emplace(spec.path, spec);
  return out;
}

std::set<std::string> data_paths(const std::vector<odc::TunableSpec>& specs) {
  std::set<std::string> out;
  for (const auto& spec : specs) {
    if (spec.path.starts_with("data.")) out.insert(spec.path);
  }
  return out;
}

}  // namespace

TEST_CASE("schemas: the data keys both tools read are the one shared declaration", "[cli][config]") {
  const auto trainer = by_path(odc::train::trainer_tunables());
  const auto sim = by_path(odc::sim::sim_tunables());
  std::set<std::string> shared_paths;
  for (const auto& shared : odc::data::data_tunables()) {
    shared_paths.insert(shared.path);
    // The simulator's planner cost adds the reference's fit (sim.fit): checked below.
    if (shared.path == "data.cost_model") continue;
    for (const auto* schema : {&trainer, &sim}) {
      INFO(shared.path);
      REQUIRE(schema->contains(shared.path));
      const auto& declared = schema->at(shared.path);
      CHECK(declared.kind == shared.kind);
      CHECK(declared.default_value == shared.default_value);
      CHECK(declared.doc == shared.doc);
      CHECK(declared.choices == shared.choices);
      CHECK(declared.range.text() == shared.range.text());
    }
  }
  // Any other data.* key is one schema's own: a key both declare must come from data_tunables(),
  // except data.format, whose choices differ (the trainer reads datasets, the simulator lengths),
  // data.minibatch_size (the trainer's has no default: data.global_batch_size may say it instead)
  // data.max_length and data.over_length (the simulator drops or truncates synthetic and file
  // lengths, dropping by default as the reference's filter does; the trainer also has error, its
  // default) and data.cost_model (the simulator adds fit, the reference's a*u^2 + b*u).
  CHECK(trainer.at("data.format").choices != sim.at("data.format").choices);
  CHECK(trainer.at("data.over_length").default_value == "error");
  CHECK(sim.at("data.over_length").default_value == "drop");
  CHECK(sim.at("data.over_length").choices == std::vector<std::string>{"drop", "truncate"});
  auto sim_costs = sim.at("data.cost_model").choices;
  CHECK(sim_costs.back() == "fit");
  sim_costs.pop_back();
  CHECK(sim_costs == trainer.at("data.cost_model").choices);
  CHECK(sim.at("data.cost_model").default_value == trainer.at("data.cost_model").default_value);
  CHECK(trainer.at("data.minibatch_size").default_value.empty());
  CHECK(sim.at("data.minibatch_size").default_value == "4");
  CHECK(trainer.at("data.max_length").default_value != sim.at("data.max_length").default_value);
  shared_paths.insert({"data.format", "data.minibatch_size", "data.max_length", "data.over_length"});
  std::set<std::string> in_both;
  const auto trainer_data = data_paths(odc::train::trainer_tunables());
  const auto sim_data = data_paths(odc::sim::sim_tunables());
  std::set_intersection(trainer_data.begin(), trainer_data.end(), sim_data.begin(), sim_data.end(),
                        std::inserter(in_both, in_both.begin()));
  CHECK(in_both == shared_paths);
  CHECK(odc::data::data_tunable("data.seed").path == "data.seed");
  CHECK_THROWS_WITH(odc::data::data_tunable("data.train"), Contains("not one of the shared data tunables"));
  // The trainer keeps the planner's unbalanced split among its choices.
  const auto& balance = trainer.at("data.balance").choices;
  CHECK(std::find(balance.begin(), balance.end(), "round_robin") != balance.end());
}

TEST_CASE("schemas: every default lies in its range, and the checked keys have the pinned ranges", "[cli][config]") {
  // Constructing a Config sets every default through the range check.
  const odc::Config trainer(odc::train::trainer_tunables());
  const odc::Config sim(odc::sim::sim_tunables());
  const std::map<std::string, std::string> trainer_ranges = {
      {"train.threads", "in [1, 1024]"},  {"comm.timeout_s", "> 0"},       {"data.minibatch_size", ">= 1"},
      {"data.max_tokens_per_microbatch", ">= 0"}, {"data.packing_ratio", "> 0"}, {"checkpoint.every", ">= 0"},
      {"checkpoint.keep", "in [0, 2147483647]"}, {"train.steps", ">= 0"}, {"train.warmup_steps", ">= 0"},
      {"train.trace_steps", ">= 0"},      {"train.peak_flops", ">= 0"},    {"train.stop_at_step", ">= 0"},
      {"train.lr", "> 0"},                {"train.min_lr", ">= 0"},        {"train.beta1", "in [0, 1)"},
      {"train.beta2", "in [0, 1)"},       {"train.eps", "> 0"},            {"train.weight_decay", ">= 0"},
      {"train.grad_clip", ">= 0"},        {"train.log_every", ">= 1"},     {"comm.chunk_bytes", ">= 4096"},
      {"comm.max_inflight", "in [1, 2147483647]"}, {"data.cost_a", ">= 0"}, {"data.cost_b", ">= 0"},
      // Read into an int, or converted to bytes: bounded so that nothing truncates or overflows.
      {"train.memory_budget_gib", "in [0, 1048576]"}, {"model.cudnn_workspace_mib", "in [1, 1073741824]"},
  };
  const auto trainer_specs = by_path(trainer.specs());
  for (const auto& [path, range] : trainer_ranges) {
    INFO(path);
    CHECK(trainer_specs.at(path).range.text() == range);
  }
  const std::map<std::string, std::string> sim_ranges = {
      {"sim.devices", "in [1, 65536]"}, {"data.minibatch_size", ">= 1"}, {"sim.minibatches", ">= 1"},
      {"sim.skip_minibatches", ">= 0"}, {"sim.prefetch_depth", "in [0, 64]"},
      {"sim.max_outstanding_reductions", "in [1, 2147483647]"},
      {"sim.devices_per_node", ">= 0"}, {"sim.intra_node_gbps", ">= 0"}, {"sim.odc_param_bytes", ">= 0"},
      {"data.num_sequences", ">= 0"},   {"data.max_tokens_per_microbatch", ">= 0"}, {"data.packing_ratio", "> 0"},
      {"sim.matmul_efficiency", "in (0, 1]"}, {"sim.odc_inter_node_efficiency", "in (0, 1]"},
      {"sim.param_bytes", "> 0"},       {"data.mean_length", ">= 1"},    {"data.sigma", ">= 0"},
  };
  const auto sim_specs = by_path(sim.specs());
  for (const auto& [path, range] : sim_ranges) {
    INFO(path);
    CHECK(sim_specs.at(path).range.text() == range);
  }
}

TEST_CASE("schemas: the planner inputs read from the shared keys", "[cli][config]") {
  odc::Config config(odc::data::data_tunables());
  CHECK(odc::data::token_cap(config, 1000) == 1000);  // cap 0: the longest sequence x packing ratio 1
  config.apply_assignment("data.packing_ratio=1.5");
  CHECK(odc::data::token_cap(config, 1001) == 1501);  // floor(1501.5)
  config.apply_assignment("data.max_tokens_per_microbatch=64");
  CHECK(odc::data::token_cap(config, 1001) == 64);  // an explicit cap ignores the ratio

  CHECK(odc::data::cost_model(config, 6.0e6, 1.0e3).kind == "flops");
  config.apply_assignment("data.cost_model=quadratic");
  config.apply_assignment("data.cost_a=0.001");
  const auto quadratic = odc::data::cost_model(config, 6.0e6, 1.0e3);
  CHECK(quadratic.kind == "quadratic");
  CHECK(quadratic.a == 0.001);
  CHECK(quadratic.b == 1.0);
  config.apply_assignment("data.cost_model=linear");
  CHECK(odc::data::cost_model(config, 6.0e6, 1.0e3).kind == "linear");
}
