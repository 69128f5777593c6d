// Exact resume under mpirun: 20 steps straight vs 10 steps + stop + resume for 10, per comm.
// Collectives reduce in a fixed order, so the losses are bitwise equal. ODC owners add every
// microbatch's pushes in arrival order, which varies from run to run (two straight ODC runs
// already differ in the last bits, ~1e-10 relative), so the bound there is 1e-6 relative.
#include <mpi.h>

#include <cmath>
#include <filesystem>

#include <catch2/catch.hpp>

#include "mpi_test_support.h"
#include "odc/train/run/trainer.h"

using namespace odc;
using test::mpi_rank;
using test::mpi_world;

TEST_CASE("training resumed from a native checkpoint continues exactly", "[mpi][checkpoint]") {
  const int world = mpi_world();
  if (world == 1) return;  // the one-rank case is a unit test
  const auto data = test::ragged_dataset("resume", 64);
  for (const std::string comm : {"collective", "odc"}) {
    const auto dir = std::filesystem::temp_directory_path() / ("odc_mpi_resume_" + comm + std::to_string(world));
    if (mpi_rank() == 0) std::filesystem::remove_all(dir);
    MPI_Barrier(MPI_COMM_WORLD);
    const std::vector<std::string> common = {"train.comm=" + comm, "train.steps=20", "data.max_tokens_per_microbatch=64",
                                             "data.balance=" + std::string(comm == "odc" ? "lb_mini" : "lb_micro")};
    auto with = [&](std::vector<std::string> extra) {
      extra.insert(extra.end(), common.begin(), common.end());
      return test::small_config(data, 8 / world, extra);
    };
    std::vector<train::StepResult> all;
    {
      const auto straight_group = test::world_group();
      train::Trainer straight(with({"checkpoint.resume=never"}), *straight_group);
      all = straight.run();
    }
    const std::string ckpt = "checkpoint.dir=" + (dir / "ckpt").string();
    {
      const auto first_group = test::world_group();
      train::Trainer first(with({ckpt, "train.stop_at_step=10"}), *first_group);
      REQUIRE(first.run().size() == 10);
    }
    const auto second_group = test::world_group();
    train::Trainer second(with({ckpt}), *second_group);
    REQUIRE(second.steps_done() == 10);
    const auto rest = second.run();
    REQUIRE(rest.size() == 10);
    const bool bitwise = comm == "collective";
    double worst = 0.0;
    for (std::size_t i = 0; i < 10; ++i) {
      const double a = rest[i].loss, b = all[i + 10].loss;
      worst = std::max(worst, std::abs(a - b) / std::abs(b));
      if (bitwise) REQUIRE(a == b);
    }
    INFO(comm << " on " << world << " ranks: worst relative loss difference " << worst);
    REQUIRE(worst <= 1e-6);
  }
}
