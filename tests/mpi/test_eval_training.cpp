// Evaluation during training under mpirun (train/run/evaluation.h): the eval loss of N ranks under
// ODC (ranks running different numbers of eval microbatches) and under the collective baseline
// (short ranks padded with empty microbatches) equals the eval loss of one rank on the same run.
#include <mpi.h>

#include <cmath>
#include <fstream>
#include <set>

#include <catch2/catch.hpp>

#include "mpi_test_support.h"
#include "odc/train/config/config_schema.h"
#include "odc/train/run/evaluation.h"
#include "odc/train/config/run_settings.h"
#include "odc/train/run/trainer.h"

using namespace odc;
using test::mpi_rank;
using test::mpi_world;

namespace {

constexpr int kGlobalMinibatch = 8;

// A held-out set: ragged_dataset's shape with another seed, 3..~60 tokens, the last two thirds targets.
std::filesystem::path heldout_dataset(int sequences) { return test::ragged_dataset("eval_heldout", sequences, 77); }

std::vector<std::string> eval_extra(const std::filesystem::path& eval, const std::string& comm) {
  return {"data.eval=" + eval.string(), "train.steps=3", "train.eval_every=2", "train.comm=" + comm,
          "data.max_tokens_per_microbatch=64", "data.balance=lb_micro"};
}

}  // namespace

TEST_CASE("eval loss on N ranks, ODC and collective, equals one rank's", "[mpi][eval]") {
  const int world = mpi_world();
  REQUIRE(kGlobalMinibatch % world == 0);
  const auto data = test::ragged_dataset("eval_train", 64);
  const auto eval = heldout_dataset(41);

  // One rank, in this process (every rank computes the same reference).
  std::vector<train::EvalSummary> reference;
  {
    const auto config = test::small_config(data, kGlobalMinibatch, eval_extra(eval, "odc"));
    train::Trainer trainer(config);
    REQUIRE(trainer.run(false).empty());
    reference.push_back(*trainer.last_eval());
    reference.push_back(trainer.evaluate());  // the same weights again: the same number
  }
  CHECK(reference[0].step == 3);
  CHECK(reference[1].loss == reference[0].loss);

  for (const std::string comm : {"odc", "collective"}) {
    INFO("train.comm = " << comm << ", " << world << " ranks");
    const auto config = test::small_config(data, kGlobalMinibatch / world, eval_extra(eval, comm));
    if (world > 1) {
      // The eval shares differ in microbatch count between ranks (what ODC runs unpadded and the
      // collective baseline pads).
      const auto model = train::training_model_config(config);
      std::set<std::size_t> counts;
      for (int r = 0; r < world; ++r) {
        counts.insert(train::Evaluator(train::resolve_run_settings(config), model, r, world, 64).microbatches().size());
      }
      CHECK(counts.size() > 1);
    }
    const auto group = test::world_group();
    train::Trainer trainer(config, *group);
    trainer.run(false);
    REQUIRE(trainer.last_eval().has_value());
    const train::EvalSummary got = *trainer.last_eval();
    CHECK(got.step == reference[0].step);
    CHECK(got.sequences == reference[0].sequences);
    CHECK(got.tokens == reference[0].tokens);
    // The training steps sum the same gradients in another order (and the eval sums too): 1e-5.
    CHECK(std::abs(got.loss - reference[0].loss) <= 1e-5 * std::abs(reference[0].loss));
    CHECK(std::abs(got.perplexity - reference[0].perplexity) <= 1e-5 * reference[0].perplexity);
  }
}
