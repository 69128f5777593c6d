// MpiHostGroup under mpirun: the same exchanges as the in-process fake, over real ranks (the
// trainer, checkpoints, exports and traces rely on them), and the topology it reports.
#include <catch2/catch.hpp>

#include "mpi_test_support.h"
#include "odc/core/error.h"
#include "odc/distributed/group/mpi_host_group.h"

using namespace odc;

TEST_CASE("mpi host group: sums, gathers, text gathers and broadcasts", "[mpi]") {
  const auto group = test::world_group();
  const int rank = group->rank();
  const int world = group->size();
  REQUIRE(rank == test::mpi_rank());
  REQUIRE(world == test::mpi_world());
  CHECK(group->topology().hosts == 1);
  CHECK(group->topology().local_size == world);

  std::vector<double> sums = {1.0 * rank, 2.0};
  group->all_reduce_sum(sums, "a test sum");
  CHECK(sums == std::vector<double>{world * (world - 1) / 2.0, 2.0 * world});

  const std::vector<float> mine = {static_cast<float>(rank), 0.5f + static_cast<float>(rank)};
  std::vector<float> all(group->is_root() ? 2 * static_cast<std::size_t>(world) : 0);
  group->gather_values<float>(mine, all, "a test gather");
  // To the last rank (the export's pieces go to the rank writing their file).
  std::vector<float> at_last(rank == world - 1 ? 2 * static_cast<std::size_t>(world) : 0);
  group->gather_values<float>(mine, at_last, "a test gather to the last rank", world - 1);
  for (int r = 0; r < static_cast<int>(at_last.size()) / 2; ++r) {
    CHECK(at_last[2 * static_cast<std::size_t>(r)] == static_cast<float>(r));
    CHECK(at_last[2 * static_cast<std::size_t>(r) + 1] == 0.5f + static_cast<float>(r));
  }
  CHECK(at_last.size() == (rank == world - 1 ? 2 * static_cast<std::size_t>(world) : 0));
  const auto texts = group->gather_text(std::string(static_cast<std::size_t>(rank) * 3, 'a' + static_cast<char>(rank)),
                                        "a test text gather");
  if (group->is_root()) {
    for (int r = 0; r < world; ++r) {
      CHECK(all[2 * static_cast<std::size_t>(r)] == static_cast<float>(r));
      CHECK(all[2 * static_cast<std::size_t>(r) + 1] == 0.5f + static_cast<float>(r));
      CHECK(texts[static_cast<std::size_t>(r)] == std::string(static_cast<std::size_t>(r) * 3, 'a' + static_cast<char>(r)));
    }
  } else {
    CHECK(texts.empty());
  }
  std::string decision = group->is_root() ? "resume from step-8" : "";
  group->broadcast(decision, "a test broadcast");
  CHECK(decision == "resume from step-8");
  group->barrier("the end of the test");
}

TEST_CASE("mpi host group: different inputs stop every rank, naming the ranks", "[mpi]") {
  const auto group = test::world_group();
  if (group->size() < 2) return;
  std::string error;
  try {
    distributed::check_identical_across_ranks(*group, {{"the dataset x", group->rank() == 1 ? 2u : 1u}});
  } catch (const Error& e) {
    error = e.what();
  }
  CHECK_THAT(error, Catch::Contains("the dataset x differs between rank 0 and rank(s) 1"));
}
