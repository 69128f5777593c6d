// train.sharding under mpirun, with hosts made of consecutive blocks of ranks
// (debug.ranks_per_host; the multi-host test runs the same layouts across network namespaces):
// hybrid (sharded within a host, replicated across hosts) and hpz (full sharding plus a secondary
// copy within each host) give one rank's losses, gradient norms and weights, over ODC and the
// collective baseline; hybrid's replicas stay bitwise identical; and a hybrid checkpoint resumes,
// also onto full sharding.
#include <mpi.h>

#include <filesystem>

#include <catch2/catch.hpp>

#include "mpi_test_support.h"
#include "odc/train/run/trainer.h"

using namespace odc;
using test::mpi_rank;
using test::mpi_world;

namespace {

constexpr int kGlobalMinibatch = 8;

struct Run {
  std::vector<train::StepResult> steps;
  // Every rank's shard of every unit, gathered to rank 0 in rank order (whatever the layout).
  std::vector<std::vector<float>> shards;
  distributed::ShardingPlan plan;
};

Run train_with(const std::filesystem::path& data, const std::vector<std::string>& extra) {
  const auto config = test::small_config(data, kGlobalMinibatch / mpi_world(), extra);
  const auto group = test::world_group();
  train::Trainer trainer(config, *group);
  Run run;
  run.steps = trainer.run();
  run.plan = trainer.sharding();
  auto& store = trainer.store();
  for (int u = 0; u < store.layout().num_units(); ++u) {
    const auto shard = static_cast<int>(store.layout().unit(u).shard);
    std::vector<float> all(static_cast<std::size_t>(shard) * static_cast<std::size_t>(mpi_world()));
    MPI_Gather(store.master(u), shard, MPI_FLOAT, all.data(), shard, MPI_FLOAT, 0, MPI_COMM_WORLD);
    run.shards.push_back(std::move(all));
  }
  return run;
}

// Unit u's weights: the first ranks' shards in rank order (the first copy of the layout).
std::vector<float> unit_weights(const Run& run, int u, std::int64_t numel) {
  std::vector<float> w(run.shards[static_cast<std::size_t>(u)].begin(),
                       run.shards[static_cast<std::size_t>(u)].begin() + numel);
  return w;
}

}  // namespace

TEST_CASE("train.sharding hybrid and hpz give one rank's losses and weights, over ODC and collectives",
          "[mpi][sharding]") {
  const int world = mpi_world();
  if (world == 1) return;
  const int per_host = world / 2;  // two hosts
  const auto data = test::ragged_dataset("sharding", 96);
  const auto with = [&](const std::string& sharding, const std::string& comm) {
    // A cap just above the longest sequence (51): minimal microbatch counts differ between ranks.
    return std::vector<std::string>{"data.max_tokens_per_microbatch=52",
                                    "train.steps=8",
                                    "train.comm=" + comm,
                                    "train.sharding=" + sharding,
                                    "debug.ranks_per_host=" + std::to_string(per_host)};
  };
  const Run full = train_with(data, with("full", "odc"));
  const Run hybrid = train_with(data, with("hybrid", "odc"));
  const Run hpz = train_with(data, with("hpz", "odc"));
  const Run hybrid_collective = train_with(data, with("hybrid", "collective"));
  const Run hpz_collective = train_with(data, with("hpz", "collective"));
  const Run full_collective = train_with(data, with("full", "collective"));
  REQUIRE(hybrid.plan.kind == distributed::Sharding::hybrid);
  CHECK(hybrid.plan.shard_world == per_host);
  CHECK(hybrid.plan.replicas == 2);
  REQUIRE(hpz.plan.kind == distributed::Sharding::hpz);
  CHECK(hpz.plan.shard_world == world);

  // The planner knows the layout: lb_micro gives the ranks that run collectives together equal
  // microbatch counts, the largest minimal count among them; hybrid's collectives run inside a
  // host, so its ranks split into no more microbatches than under full sharding's world-wide
  // count (the same split of sequences), and fewer somewhere on this ragged data; hpz's pushes are
  // world-wide, so it counts like full.
  int fewer = 0;
  for (std::size_t s = 0; s < full_collective.steps.size(); ++s) {
    INFO("step " << s + 1);
    CHECK(hybrid_collective.steps[s].microbatches <= full_collective.steps[s].microbatches);
    CHECK(hpz_collective.steps[s].microbatches == full_collective.steps[s].microbatches);
    fewer += full_collective.steps[s].microbatches - hybrid_collective.steps[s].microbatches;
  }
  MPI_Allreduce(MPI_IN_PLACE, &fewer, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  CHECK(fewer > 0);

  if (mpi_rank() == 0) {
    // One rank is one host: the reference runs without debug.ranks_per_host.
    auto one_rank = with("full", "odc");
    one_rank.pop_back();
    const auto reference_config = test::small_config(data, kGlobalMinibatch, one_rank);
    train::Trainer reference(reference_config);
    const auto expected = reference.run();
    REQUIRE(expected.size() == 8);
    // 1e-5: the same fp32 terms summed in another order (owners add pushes in arrival order; the
    // hybrid layout adds the hosts' sums last).
    for (std::size_t s = 0; s < expected.size(); ++s) {
      INFO("step " << s + 1);
      for (const Run* run : {&full, &hybrid, &hpz, &hybrid_collective, &hpz_collective, &full_collective}) {
        CHECK(run->steps[s].loss == Approx(expected[s].loss).epsilon(1e-5));
        CHECK(run->steps[s].grad_norm == Approx(expected[s].grad_norm).epsilon(1e-5));
      }
    }
    auto& ref = reference.store();
    for (int u = 0; u < ref.layout().num_units(); ++u) {
      INFO("unit " << u);
      const std::int64_t numel = ref.layout().unit(u).numel;
      const std::vector<float> w(ref.master(u), ref.master(u) + numel);
      for (const Run* run : {&full, &hybrid, &hpz, &hybrid_collective, &hpz_collective}) {
        CHECK(test::relative_difference(unit_weights(*run, u, numel), w) < 1e-5);
      }
      // Every host holds the same shards, bit for bit: they took the same steps on the same sums.
      for (const Run* run : {&hybrid, &hybrid_collective}) {
        const auto& all = run->shards[static_cast<std::size_t>(u)];
        const std::size_t host_bytes = all.size() / 2;
        CHECK(std::equal(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(host_bytes),
                         all.begin() + static_cast<std::ptrdiff_t>(host_bytes)));
      }
    }
  }
}

TEST_CASE("a hybrid checkpoint holds one copy of the shards and resumes, also onto full sharding",
          "[mpi][sharding][checkpoint]") {
  const int world = mpi_world();
  if (world == 1) return;
  const int per_host = world / 2;
  const auto data = test::ragged_dataset("sharding_ckpt", 96);
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "odc_sharding_ckpt";
  if (mpi_rank() == 0) std::filesystem::remove_all(dir);
  MPI_Barrier(MPI_COMM_WORLD);
  const auto with = [&](const std::string& sharding, std::vector<std::string> more) {
    std::vector<std::string> extra{"data.max_tokens_per_microbatch=64", "train.steps=6", "train.sharding=" + sharding,
                                   "debug.ranks_per_host=" + std::to_string(per_host), "checkpoint.dir=" + dir.string()};
    extra.insert(extra.end(), more.begin(), more.end());
    return extra;
  };
  const Run straight = train_with(data, with("hybrid", {"checkpoint.resume=never", "checkpoint.every=0"}));
  if (mpi_rank() == 0) std::filesystem::remove_all(dir);
  MPI_Barrier(MPI_COMM_WORLD);
  const Run first = train_with(data, with("hybrid", {"checkpoint.resume=never", "train.stop_at_step=3"}));
  REQUIRE(first.steps.size() == 3);
  if (mpi_rank() == 0) {
    // One copy: the files of one host's ranks.
    std::size_t rank_files = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir / "step-00000003")) {
      const std::string name = entry.path().filename().string();
      rank_files += name.rfind("rank-", 0) == 0 && entry.path().extension() == ".safetensors" ? 1 : 0;
    }
    CHECK(rank_files == static_cast<std::size_t>(per_host));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const Run resumed = train_with(data, with("hybrid", {"checkpoint.resume=auto"}));
  // Onto full sharding over every rank, from the same checkpoint: its per_host ranks' shards are
  // resharded (the hybrid continuation's later checkpoint becomes an abandoned branch).
  const Run onto_full = train_with(data, with("full", {"checkpoint.resume=" + (dir / "step-00000003").string()}));
  REQUIRE(resumed.steps.size() == 3);
  REQUIRE(onto_full.steps.size() == 3);
  for (std::size_t s = 0; s < 3; ++s) {
    INFO("step " << s + 4);
    // 1e-5 as above; the resumed hybrid run repeats the straight one's sums in the same layout.
    CHECK(resumed.steps[s].loss == Approx(straight.steps[s + 3].loss).epsilon(1e-5));
    CHECK(onto_full.steps[s].loss == Approx(straight.steps[s + 3].loss).epsilon(1e-5));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (mpi_rank() == 0) std::filesystem::remove_all(dir);
}
