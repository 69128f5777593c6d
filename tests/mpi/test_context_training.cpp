// Context parallelism under mpirun: a dataset whose few long sequences exceed the microbatch cap
// trains on N ranks with those sequences split (ODC: groups of 2-4 ranks chosen per minibatch;
// the collective: static groups), and gives one unsplit rank's losses and gradient norms, the
// first step's within 1e-6 (the same weights, the same fp32 terms summed in another order), and
// every later step's and the final weights within 1e-5 as the other multi-rank tests hold them;
// comm.deterministic runs repeat bit for bit, and recomputation changes nothing.
#include <mpi.h>

#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>

#include "mpi_test_support.h"
#include "odc/train/run/trainer.h"
#include "unit/synthetic_data.h"

using namespace odc;
using test::mpi_rank;
using test::mpi_world;

namespace {

constexpr int kGlobalMinibatch = 8;

// 64 sequences of 3 to 24 tokens, every seventh one 61 to 91 tokens (odd and even lengths).
std::filesystem::path long_tail_dataset() {
  const auto path = std::filesystem::temp_directory_path() / "odc_mpi_tests" / "context.jsonl";
  if (mpi_rank() == 0) {
    std::filesystem::create_directories(path.parent_path());
    std::ofstream out(path);
    const auto length = [](int i, test::Lcg& rng) {
      const std::uint32_t state = rng.next();
      return i % 7 == 3 ? 61 + static_cast<int>((state >> 9) % 31) : 3 + static_cast<int>((state >> 9) % 22);
    };
    out << test::synthetic_jsonl({64, 77, length, 50, 12, 3});
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return path;
}

struct Run {
  std::vector<train::StepResult> steps;
  std::vector<std::vector<float>> weights;  // valid on rank 0
};

std::vector<std::string> with(std::vector<std::string> extra, const std::vector<std::string>& more) {
  extra.insert(extra.end(), more.begin(), more.end());
  extra.push_back("train.steps=4");
  return extra;
}

Run train_with(const std::filesystem::path& data, const std::vector<std::string>& extra) {
  const auto config = test::small_config(data, kGlobalMinibatch / mpi_world(), extra);
  const auto group = test::world_group();
  train::Trainer trainer(config, *group);
  Run run;
  run.steps = trainer.run();
  run.weights = test::gather_weights(trainer.store());
  return run;
}

void check_against(const Run& run, const std::vector<train::StepResult>& expected, distributed::ShardStore& ref,
                   const std::string& name) {
  INFO(name);
  REQUIRE(run.steps.size() == expected.size());
  for (std::size_t s = 0; s < expected.size(); ++s) {
    INFO("step " << s + 1);
    const double tolerance = s == 0 ? 1e-6 : 1e-5;
    CHECK(run.steps[s].loss == Approx(expected[s].loss).epsilon(tolerance));
    CHECK(run.steps[s].grad_norm == Approx(expected[s].grad_norm).epsilon(tolerance));
  }
  for (int u = 0; u < ref.layout().num_units(); ++u) {
    std::vector<float> w(ref.master(u), ref.master(u) + ref.layout().unit(u).numel);
    INFO("unit " << u);
    CHECK(test::relative_difference(run.weights[static_cast<std::size_t>(u)], w) < 1e-5);
  }
}

}  // namespace

TEST_CASE("sequences over the cap train split over several ranks, as one rank trains them whole", "[mpi][context]") {
  const int world = mpi_world();
  if (world == 1) return;
  const auto data = long_tail_dataset();
  // Cap 48: the long sequences need 2 ranks; cap 24 (4 ranks): 3 or 4.
  std::vector<std::vector<std::string>> caps = {{"data.max_tokens_per_microbatch=48"}};
  if (world >= 4) caps.push_back({"data.max_tokens_per_microbatch=24"});
  for (const auto& cap : caps) {
    INFO(cap[0]);
    const Run odc = train_with(data, with(cap, {"train.comm=odc"}));
    const Run odc_ipc = train_with(data, with(cap, {"train.comm=odc", "comm.transport=ipc"}));
    const Run collective = train_with(data, with(cap, {"train.comm=collective"}));
    if (mpi_rank() == 0) {
      // One rank, every sequence whole (a cap that holds the longest).
      const auto reference_config =
          test::small_config(data, kGlobalMinibatch, with({"data.max_tokens_per_microbatch=96"}, {}));
      train::Trainer reference(reference_config);
      const auto expected = reference.run();
      check_against(odc, expected, reference.store(), "odc");
      check_against(odc_ipc, expected, reference.store(), "odc over ipc");
      check_against(collective, expected, reference.store(), "collective (static groups)");
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

TEST_CASE("split sequences under comm.deterministic repeat bit for bit; recomputation changes nothing",
          "[mpi][context]") {
  if (mpi_world() == 1) return;
  const auto data = long_tail_dataset();
  const std::vector<std::string> det = {"data.max_tokens_per_microbatch=48", "comm.deterministic=true"};
  const Run a = train_with(data, with(det, {}));
  const Run b = train_with(data, with(det, {}));
  const Run full = train_with(data, with(det, {"train.recompute=full"}));
  const Run selective = train_with(data, with(det, {"train.recompute=selective"}));
  for (std::size_t s = 0; s < a.steps.size(); ++s) {
    INFO("step " << s + 1);
    CHECK(a.steps[s].loss == b.steps[s].loss);  // bitwise
    CHECK(a.steps[s].grad_norm == b.steps[s].grad_norm);
    CHECK(full.steps[s].loss == a.steps[s].loss);
    CHECK(full.steps[s].grad_norm == a.steps[s].grad_norm);
    CHECK(selective.steps[s].loss == a.steps[s].loss);
    CHECK(selective.steps[s].grad_norm == a.steps[s].grad_norm);
  }
  if (mpi_rank() == 0) {
    CHECK(a.weights == b.weights);
    CHECK(full.weights == a.weights);
    CHECK(selective.weights == a.weights);
  }
}

TEST_CASE("a sequence no allowed group fits, or context parallelism off, is refused naming it", "[mpi][context]") {
  if (mpi_world() == 1) return;
  const auto data = long_tail_dataset();
  const auto refused = [&](const std::vector<std::string>& extra) {
    try {
      train_with(data, with(extra, {}));
    } catch (const odc::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string off = refused({"data.max_tokens_per_microbatch=48", "train.context_parallel=off"});
  CHECK_THAT(off, Catch::Contains("exceeds the microbatch cap") && Catch::Contains("train.context_parallel: auto"));
  // Split over 2 ranks at most, a share of a 90-token sequence is still 45 tokens: over a cap of 24.
  const std::string capped = refused({"data.max_tokens_per_microbatch=24", "train.context_parallel_degree=2"});
  CHECK_THAT(capped, Catch::Contains("it needs") && Catch::Contains("ranks") && Catch::Contains("sequence"));
}
