// Context parallelism in the simulator: a dynamic group's members move in step (each step waits
// for the slowest member and adds the exchange), the work a plan with groups or a static degree
// gives every device, and the sim.context_* keys.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "odc/core/error.h"
#include "odc/data/context_groups.h"
#include "odc/sim/runner.h"
#include "odc/sim/schedule.h"
#include "odc/sim/sim_config.h"

using namespace odc::sim;

namespace {

UnitBytes no_bytes(const ComputeModel& compute) {
  const auto units = static_cast<std::size_t>(compute.num_units());
  return UnitBytes{std::vector<double>(units, 0.0), std::vector<double>(units, 0.0)};
}

}  // namespace

TEST_CASE("sim context: a group's members run its steps together, then their own work", "[sim][context]") {
  const ComputeModel compute = ComputeModel::uniform(2, 1e-3);
  MicrobatchWork wide{10, 0.0, 1, 0, 0.5, 1.0};   // member 0: 10 rows
  MicrobatchWork narrow{6, 0.0, 1, 0, 0.5, 1.0};  // member 1: 6 rows
  MicrobatchWork own{5, 0.0, 1};
  const std::vector<DeviceWork> work = {{wide}, {narrow, own}};
  ScheduleOptions options;
  const auto timeline = simulate_minibatch(work, compute, no_bytes(compute), LinkModel::free(2), CommKind::odc, options);
  // Every step lasts member 0's compute plus the exchange (2 decoder layers: 2 x 0.5 forward,
  // 2 x 1.0 backward): the group ends at T(10) + 3 on both.
  const double group = compute.microbatch_time(10, 0.0) + 3.0;
  REQUIRE(timeline.devices[0].finish_s == Approx(group).epsilon(1e-12));
  REQUIRE(timeline.devices[1].finish_s == Approx(group + compute.microbatch_time(5, 0.0)).epsilon(1e-12));
  REQUIRE(timeline.devices[0].exchange_s == Approx(3.0).epsilon(1e-12));
  // Member 1 waits for member 0 at every step besides exchanging.
  REQUIRE(timeline.devices[1].exchange_s ==
          Approx(3.0 + compute.microbatch_time(10, 0.0) - compute.microbatch_time(6, 0.0)).epsilon(1e-12));
  REQUIRE(timeline.devices[1].compute_s == Approx(compute.microbatch_time(6, 0.0) + compute.microbatch_time(5, 0.0)));
  // The collective adds a static group's exchange to its steps the same way.
  const std::vector<DeviceWork> statics = {{MicrobatchWork{10, 0.0, 1, -1, 0.5, 1.0}}, {MicrobatchWork{10, 0.0, 1, -1, 0.5, 1.0}}};
  const auto collective =
      simulate_minibatch(statics, compute, no_bytes(compute), LinkModel::free(2), CommKind::collective, options);
  REQUIRE(collective.devices[0].finish_s == Approx(group).epsilon(1e-12));
  // A group that does not lead a member's work is refused.
  const std::vector<DeviceWork> late = {{own, wide}, {narrow}};
  REQUIRE_THROWS_AS(simulate_minibatch(late, compute, no_bytes(compute), LinkModel::free(2), CommKind::odc, options),
                    odc::Error);
}

TEST_CASE("sim context: the work of a plan with groups and with a static degree", "[sim][context]") {
  ExchangeModel exchange;
  exchange.kv_bytes_per_token = 100.0;
  exchange.link.devices = 4;
  exchange.link.devices_per_node = 4;
  exchange.link.intra_bandwidth = 1e6;
  exchange.link.latency = 1e-3;
  odc::data::Plan plan;
  plan.groups = {odc::data::ContextGroup{0, {2, 0}, 1.0}};
  plan.ranks.resize(4);
  plan.ranks[0].groups = {0};
  plan.ranks[2].groups = {0};
  plan.ranks[1].microbatches = {{1}};
  const std::vector<std::int64_t> lengths = {1000, 300};
  const auto work = work_from_plan(plan, lengths, exchange);
  REQUIRE(work[2].size() == 1);  // member 0
  REQUIRE(work[2][0].tokens == odc::data::context_rows(1000, 2, 0));
  REQUIRE(work[0][0].pairs == odc::data::context_share_pairs(1000, 2, 1));
  REQUIRE(work[0][0].group == 0);
  // Half the sequence's K/V rows received: 500 x 100 B at 1 MB/s, + latency; the backward three
  // times (the gather again, the gradients returned, the recomputed forward's gather).
  REQUIRE(work[0][0].exchange_forward_s == Approx(1e-3 + 0.05));
  REQUIRE(work[0][0].exchange_backward_s == Approx(3 * (1e-3 + 0.05)));
  REQUIRE(work[1][0].tokens == 300);
  REQUIRE(work[1][0].exchange_forward_s == 0.0);
  REQUIRE(work[3].empty());
  // Static degree 2: every microbatch is the member's share.
  odc::data::Plan statics;
  statics.context_degree = 2;
  statics.ranks.resize(2);
  statics.ranks[0].microbatches = {{0, 1}};
  statics.ranks[1].microbatches = {{0, 1}};
  const auto shares = work_from_plan(statics, lengths, exchange);
  REQUIRE(shares[1][0].tokens == odc::data::context_rows(1000, 2, 1) + odc::data::context_rows(300, 2, 1));
  REQUIRE(shares[0][0].exchange_forward_s == Approx(1e-3 + (500 + 150) * 100.0 / 1e6));
}

TEST_CASE("sim context: the keys", "[sim][context]") {
  auto setup = [](std::vector<std::string> sets) {
    sets.push_back("data.max_length=131072");
    sets.push_back("data.mean_length=34700");
    sets.push_back("data.min_length=2048");
    sets.push_back("data.max_tokens_per_microbatch=65536");
    sets.push_back("sim.minibatches=4");
    return build_setup(load_sim_config("", sets), "test");
  };
  // Without the switch a sequence over the cap is refused, naming it.
  try {
    (void)setup({});
    FAIL("expected an error");
  } catch (const odc::Error& e) {
    REQUIRE(std::string(e.what()).find("sim.context_parallel") != std::string::npos);
  }
  const SimSetup s = setup({"sim.context_parallel=true", "sim.methods=collective+lb_micro,odc+lb_mini"});
  REQUIRE(s.context_parallel);
  REQUIRE(s.context_degree == 2);  // the smallest dividing 8 devices whose share of the longest fits 64K
  REQUIRE(s.cost.exchange_per_token > 0.0);
  REQUIRE(s.exchange.kv_bytes_per_token > 0.0);
  REQUIRE_THROWS_AS(setup({"sim.context_parallel=true", "sim.methods=odc+lb_micro"}), odc::Error);
  REQUIRE_THROWS_AS(setup({"sim.context_parallel=true", "sim.context_degree=3"}), odc::Error);
  // A run: both schedules plan and replay the long sequences.
  const SimResults results = run_simulation(s);
  REQUIRE(results.methods.size() == 2);
  for (const auto& r : results.methods) REQUIRE(r.minibatch_time_s > 0.0);
}
