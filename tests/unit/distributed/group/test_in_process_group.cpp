// InProcessGroup: N threads exchange exactly what MPI ranks would, and it rejects what MPI would
// hang on or mix up (ranks calling different exchanges, a rank that never arrives).
#include <catch2/catch.hpp>

#include "odc/distributed/group/in_process_group.h"
#include "unit/rank_threads.h"

using namespace odc;
using distributed::HostGroup;
using distributed::InProcessGroup;

using test::on_every_rank;

TEST_CASE("in-process group: sums, gathers and broadcasts like MPI ranks", "[distributed]") {
  for (int size : {1, 2, 4}) {
    std::vector<std::vector<double>> sums(static_cast<std::size_t>(size));
    std::vector<std::vector<std::int32_t>> gathered(static_cast<std::size_t>(size));
    std::vector<std::vector<std::int32_t>> gathered_last(static_cast<std::size_t>(size));
    std::vector<std::vector<std::string>> texts(static_cast<std::size_t>(size));
    std::vector<std::string> broadcasts(static_cast<std::size_t>(size));
    const auto errors = on_every_rank(size, [&](HostGroup& g) {
      const auto r = static_cast<std::size_t>(g.rank());
      for (int round = 0; round < 50; ++round) {  // repeated exchanges must not mix rounds
        std::vector<double> v = {1.0 * g.rank(), 0.5, static_cast<double>(round)};
        g.all_reduce_sum(v, "sum");
        sums[r] = v;
      }
      const std::vector<std::int32_t> mine = {g.rank() * 10, g.rank() * 10 + 1};
      std::vector<std::int32_t> all(g.is_root() ? 2 * static_cast<std::size_t>(g.size()) : 0);
      g.gather_values<std::int32_t>(mine, all, "gather");
      gathered[r] = all;
      // To another rank (the export's pieces go to the rank writing their file).
      const bool last = g.rank() == g.size() - 1;
      std::vector<std::int32_t> at_last(last ? 2 * static_cast<std::size_t>(g.size()) : 0);
      g.gather_values<std::int32_t>(mine, at_last, "gather to the last rank", g.size() - 1);
      gathered_last[r] = at_last;
      texts[r] = g.gather_text(std::string(static_cast<std::size_t>(g.rank()), 'x'), "texts");
      std::string message = g.is_root() ? "from rank 0" : "ignored";
      g.broadcast(message, "broadcast");
      broadcasts[r] = message;
      g.barrier("done");
    });
    for (int r = 0; r < size; ++r) {
      const auto i = static_cast<std::size_t>(r);
      REQUIRE(errors[i].empty());
      CHECK(sums[i] == std::vector<double>{size * (size - 1) / 2.0, 0.5 * size, 49.0 * size});
      CHECK(broadcasts[i] == "from rank 0");
      std::vector<std::int32_t> everyone;
      for (int q = 0; q < size; ++q) everyone.insert(everyone.end(), {q * 10, q * 10 + 1});
      CHECK(gathered_last[i] == (r == size - 1 ? everyone : std::vector<std::int32_t>{}));
      if (r == 0) {
        std::vector<std::int32_t> expected;
        for (int q = 0; q < size; ++q) expected.insert(expected.end(), {q * 10, q * 10 + 1});
        CHECK(gathered[i] == expected);
        REQUIRE(texts[i].size() == static_cast<std::size_t>(size));
        for (int q = 0; q < size; ++q) CHECK(texts[i][static_cast<std::size_t>(q)] == std::string(static_cast<std::size_t>(q), 'x'));
      } else {
        CHECK(texts[i].empty());
      }
    }
  }
}

TEST_CASE("in-process group: ranks calling different exchanges fail on every rank, naming both", "[distributed]") {
  const auto errors = on_every_rank(3, [](HostGroup& g) {
    if (g.rank() == 2) {
      g.barrier("the checkpoint barrier");
    } else {
      std::vector<double> v = {1.0};
      g.all_reduce_sum(v, "the loss sum");
    }
  });
  for (const auto& e : errors) {
    CHECK_THAT(e, Catch::Contains("barrier 'the checkpoint barrier'") && Catch::Contains("'the loss sum'"));
  }
  // Different sizes of a fixed-size exchange are a mismatch too.
  const auto sizes = on_every_rank(2, [](HostGroup& g) {
    std::vector<double> v(static_cast<std::size_t>(1 + g.rank()), 1.0);
    g.all_reduce_sum(v, "sums");
  });
  for (const auto& e : sizes) CHECK_THAT(e, Catch::Contains("all_reduce_sum of 1 values") && Catch::Contains("of 2 values"));
}

TEST_CASE("in-process group: a rank that never arrives is an error after the timeout, not a hang", "[distributed]") {
  const auto errors = on_every_rank(2, [](HostGroup& g) {
    if (g.rank() == 0) g.barrier("the start-up barrier");
  }, 0.2);
  CHECK_THAT(errors[0], Catch::Contains("rank 0 waited 0.2 s in barrier 'the start-up barrier' for every rank to arrive"));
  CHECK(errors[1].empty());
}

TEST_CASE("check_identical_across_ranks names the items and ranks that differ, on every rank", "[distributed]") {
  const auto errors = on_every_rank(4, [](HostGroup& g) {
    distributed::check_identical_across_ranks(
        g, {{"the configuration", 7}, {"the dataset d.jsonl", g.rank() == 1 || g.rank() == 3 ? 9u : 8u}});
  });
  for (const auto& e : errors) {
    CHECK_THAT(e, Catch::Contains("the dataset d.jsonl differs between rank 0 and rank(s) 1, 3"));
    CHECK_THAT(e, !Catch::Contains("the configuration differs"));
  }
  const auto same = on_every_rank(3, [](HostGroup& g) { distributed::check_identical_across_ranks(g, {{"x", 1}}); });
  for (const auto& e : same) CHECK(e.empty());
}

TEST_CASE("in-process group: announce keeps each rank's activity", "[distributed]") {
  auto members = InProcessGroup::create(2);
  members[1]->announce("step 3: microbatch 2/5");
  CHECK(members[1]->activity() == "step 3: microbatch 2/5");
  CHECK(members[0]->activity().empty());
}
