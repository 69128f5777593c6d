// Multi-rank training under mpirun: N ranks with the collective baseline train exactly like one
// rank (same losses, same final weights), and bad launches fail loudly on every rank.
#include <catch2/catch.hpp>

#include "mpi_test_support.h"
#include "odc/train/run/trainer.h"

using namespace odc;
using test::mpi_rank;
using test::mpi_world;

namespace {
// Global minibatch of 8 sequences whatever the world size, so every world size sees the same data.
constexpr int kGlobalMinibatch = 8;
}  // namespace

TEST_CASE("collective training on N ranks matches one rank step by step", "[mpi]") {
  const int world = mpi_world();
  REQUIRE(kGlobalMinibatch % world == 0);
  const auto data = test::ragged_dataset("collective", 96);
  // A small cap makes ranks run different numbers of microbatches, so padding is exercised.
  const std::vector<std::string> extra = {"train.comm=collective", "data.max_tokens_per_microbatch=64", "data.balance=round_robin"};
  const auto config = test::small_config(data, kGlobalMinibatch / world, extra);
  const auto trainer_group = test::world_group();
  train::Trainer trainer(config, *trainer_group);
  const auto results = trainer.run();
  int padded = 0;
  for (const auto& r : results) padded += r.padded_microbatches_global;
  const auto weights = test::gather_weights(trainer.store());

  if (mpi_rank() == 0) {
    // The reference: the same job on one rank, computed here on rank 0 alone.
    const auto reference_config = test::small_config(data, kGlobalMinibatch, extra);
    train::Trainer reference(reference_config);
    const auto expected = reference.run();
    REQUIRE(expected.size() == results.size());
    // Tolerance 1e-5: the ranks sum the same fp32 gradient terms in a different order.
    for (std::size_t s = 0; s < results.size(); ++s) {
      INFO("step " << s);
      CHECK(results[s].loss == Approx(expected[s].loss).epsilon(1e-5));
      CHECK(results[s].target_tokens == expected[s].target_tokens);
    }
    CHECK(results.back().loss < results.front().loss);
    if (world > 1) CHECK(padded > 0);  // some step had unequal microbatch counts
    auto& ref_store = reference.store();
    for (int u = 0; u < ref_store.layout().num_units(); ++u) {
      std::vector<float> ref(ref_store.master(u), ref_store.master(u) + ref_store.layout().unit(u).numel);
      INFO("unit " << u);
      CHECK(test::relative_difference(weights[static_cast<std::size_t>(u)], ref) < 1e-5);
    }
  }
}

TEST_CASE("ranks that loaded different configs stop with an error naming them", "[mpi]") {
  const int world = mpi_world();
  if (world < 2) return;
  const auto data = test::ragged_dataset("mismatch", 32);
  const std::string lr = mpi_rank() == world - 1 ? "train.lr=0.002" : "train.lr=0.001";
  const auto config = test::small_config(data, 2, {"train.comm=collective", lr});
  const std::string who = "rank(s) " + std::to_string(world - 1);
  CHECK_THROWS_WITH(train::Trainer(config, *test::world_group()),
                    Catch::Contains("the configuration differs between rank 0 and " + who));
}

TEST_CASE("a world size too large to shard the model is refused on every rank", "[mpi]") {
  const int world = mpi_world();
  if (world < 3) return;
  const auto data = test::ragged_dataset("too_many_ranks", 32);
  // Tied embeddings leave the head unit with only hidden_size = 2 elements.
  const auto config = test::small_config(
      data, 1,
      {"train.comm=collective", "model.config={vocab_size: 50, hidden_size: 2, intermediate_size: 4, "
                                "num_hidden_layers: 1, num_attention_heads: 1, num_key_value_heads: 1, "
                                "tie_word_embeddings: true}"});
  CHECK_THROWS_WITH(train::Trainer(config, *test::world_group()),
                    Catch::Contains("world size " + std::to_string(world) + " is too large for unit 'head'"));
}
