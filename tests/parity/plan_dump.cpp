// odc_plan_dump: our planner (data::make_plan) over global minibatches read as JSON lines on
// stdin, one plan per line on stdout, for tests/parity/test_planner_reference.py, which runs the
// reference implementation's packing (re-derived in Python) on the same minibatches.
//   in:  {"lengths": [...], "world": 8, "cap": 65536, "balance": "lb_mini", "a": .., "b": .., "c": ..,
//         "reference_split": "spread"}
//        (cost = a*s^2 + b*s per sequence of s tokens, c per microbatch; c optional, default 0;
//        balance any of data.balance's, the reference's ref_lb_micro and ref_lb_mini included;
//        reference_split (ref_lb_mini's split choice) spread or makespan, optional, default spread)
//   out: {"makespan_odc": .., "makespan_collective": .., "ranks": [{"cost": .., "microbatches":
//        [[indices], ...], "microbatch_costs": [...]}, ...]}
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
      const odc::data::Plan plan = odc::data::make_plan(input);
      nlohmann::json out = {{"makespan_odc", plan.makespan_odc()}, {"makespan_collective", plan.makespan_collective()}};
      for (const auto& rank : plan.ranks) {
        out["ranks"].push_back({{"cost", rank.cost}, {"microbatches", rank.microbatches},
                                {"microbatch_costs", rank.microbatch_costs}});
      }
      std::cout << out.dump() << "\n";
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "odc_plan_dump: %s\n", e.what());
    return 1;
  }
  return 0;
}
