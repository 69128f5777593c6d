// odc_plan_dump: our planner (data::make_plan) over global minibatches read as JSON lines on
// stdin, one plan per line on stdout, for tests/parity/test_planner_reference.py, which runs the
// reference implementation's packing (re-derived in Python) on the same minibatches.
//   in:  {"lengths": [...], "world": 8, "cap": 65536, "balance": "lb_mini", "a": .., "b": .., "c": ..,
//         "reference_split": "spread"}
//        (cost = a*s^2 + b*s per sequence of s tokens, c per microbatch; c optional, default 0;
//        balance any of data.balance's, the reference's ref_lb_micro and ref_lb_mini included;
//        reference_split (ref_lb_mini's split choice) spread or makespan, optional, default spread;
//        context parallelism, optional: "context_dynamic": true, "max_context_degree": K,
//        "context_degree": D, "exchange": cost per token of the exchange)
//   out: {"makespan_odc": .., "makespan_collective": .., "ranks": [{"cost": .., "microbatches":
//        [[indices], ...], "microbatch_costs": [...]}, ...]}, and only when the plan splits
//        sequences: "groups": [{"sequence": i, "length": L, "k": k, "ranks": [...], "cost": ..}, ...]
//        (dynamic, in execution order; a rank's entry then has "groups": [indices]) or
//        "context_degree": D (static)
// Exit 1 with the message for a bad line (odc::Error).
#include <cstdio>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "odc/core/error.h"
#include "odc/data/planner.h"

int main() {
  std::string line;
  try {
    while (std::getline(std::cin, line)) {
      if (line.empty()) continue;
      const auto in = nlohmann::json::parse(line);
      odc::data::PlanInput input;
      input.lengths = in.at("lengths").get<std::vector<std::int64_t>>();
      input.world_size = in.at("world").get<int>();
      input.token_cap = in.at("cap").get<std::int64_t>();
      input.balance = odc::data::parse_balance(in.at("balance").get<std::string>());
      input.cost = odc::data::CostModel::quadratic(in.at("a").get<double>(), in.at("b").get<double>());
      input.cost.per_microbatch = in.value("c", 0.0);
      const std::string split = in.value("reference_split", std::string("spread"));
      if (split != "spread" && split != "makespan") {
        odc::fail("reference_split must be spread or makespan, got '{}'", split);
      }
      input.reference_split = split == "spread" ? odc::data::ReferenceSplit::spread : odc::data::ReferenceSplit::makespan;
      input.context_dynamic = in.value("context_dynamic", false);
      input.max_context_degree = in.value("max_context_degree", 0);
      input.context_degree = in.value("context_degree", 1);
      input.cost.exchange_per_token = in.value("exchange", 0.0);
      const odc::data::Plan plan = odc::data::make_plan(input);
      nlohmann::json out = {{"makespan_odc", plan.makespan_odc()}, {"makespan_collective", plan.makespan_collective()}};
      for (const auto& rank : plan.ranks) {
        nlohmann::json entry = {{"cost", rank.cost}, {"microbatches", rank.microbatches},
                                {"microbatch_costs", rank.microbatch_costs}};
        if (!rank.groups.empty()) entry["groups"] = rank.groups;
        out["ranks"].push_back(std::move(entry));
      }
      // Only plans that split sequences carry these: the output of the others is as before.
      for (const auto& group : plan.groups) {
        out["groups"].push_back({{"sequence", group.sequence},
                                 {"length", input.lengths.at(static_cast<std::size_t>(group.sequence))},
                                 {"k", group.ranks.size()},
                                 {"ranks", group.ranks},
                                 {"cost", group.cost}});
      }
      if (plan.context_degree != 1) out["context_degree"] = plan.context_degree;
      std::cout << out.dump() << "\n";
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "odc_plan_dump: %s\n", e.what());
    return 1;
  }
  return 0;
}
