// Planners under mpirun: every rank computes the identical plan, and the gradient (so the loss
// sequence) does not depend on the planner or on the comm.
#include <mpi.h>

#include <catch2/catch.hpp>

#include "mpi_test_support.h"
#include "odc/train/run/trainer.h"

using namespace odc;
using test::mpi_rank;
using test::mpi_world;

TEST_CASE("every planner trains the same model on every comm, with identical plans on all ranks", "[mpi][planner]") {
  const int world = mpi_world();
  if (8 % world != 0) return;
  const auto data = test::ragged_dataset("planners", 96);
  // Reference: one rank (any planner would do: the gradient does not depend on the plan).
  std::vector<train::StepResult> reference;
  if (mpi_rank() == 0) {
    train::Trainer one(test::small_config(data, 8, {"data.balance=local_sort", "data.max_tokens_per_microbatch=64", "train.steps=8"}));
    reference = one.run();
  }
  struct Case {
    std::string comm, balance, cost;
  };
  const std::vector<Case> cases = {{"odc", "lb_mini", "flops"},      {"odc", "lb_micro", "linear"},
                                   {"odc", "local_sort", "linear"},  {"odc", "lb_mini_equal", "flops"},
                                   {"collective", "lb_micro", "flops"}, {"collective", "local_sort", "linear"}};
  for (const auto& c : cases) {
    const auto config = test::small_config(data, 8 / world,
                                           {"train.comm=" + c.comm, "data.balance=" + c.balance,
                                            "data.cost_model=" + c.cost, "data.max_tokens_per_microbatch=64",
                                            "train.steps=8"});
    const auto trainer_group = test::world_group();
    train::Trainer trainer(config, *trainer_group);
    std::vector<train::StepResult> steps;
    for (int s = 0; s < 8; ++s) {
      steps.push_back(trainer.step());
      // The plan is the same on every rank (hash compared).
      std::uint64_t mine = trainer.last_plan_hash(), lo = 0, hi = 0;
      MPI_Allreduce(&mine, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
      MPI_Allreduce(&mine, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
      CHECK(lo == hi);
    }
    if (mpi_rank() == 0) {
      for (std::size_t s = 0; s < steps.size(); ++s) {
        INFO(c.comm << " " << c.balance << " step " << s);
        // fp32 sums in a different order per planner: 1e-5.
        CHECK(steps[s].loss == Approx(reference[s].loss).epsilon(1e-5));
      }
    }
  }
  if (world > 1) {
    const auto bad = test::small_config(data, 8 / world, {"train.comm=collective", "data.balance=lb_mini"});
    CHECK_THROWS_WITH(train::Trainer(bad, *test::world_group()), Catch::Contains("lb_mini needs train.comm = odc"));
    const auto bad_equal =
        test::small_config(data, 8 / world, {"train.comm=collective", "data.balance=lb_mini_equal"});
    CHECK_THROWS_WITH(train::Trainer(bad_equal, *test::world_group()),
                      Catch::Contains("lb_mini_equal needs train.comm = odc"));
  }
}
