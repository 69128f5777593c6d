// The keys that give the batch, the run's length and the warmup two ways: at most one of each
// pair, what each resolves to, the epochs' arithmetic, and what --dump-config adds.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "odc/core/error.h"
#include "odc/train/config/batch_schedule.h"
#include "odc/train/config/config_schema.h"

using namespace odc;
using Catch::Matchers::Contains;

namespace {

Config config_with(const std::vector<std::string>& assignments) {
  Config config(train::trainer_tunables());
  for (const auto& a : assignments) config.apply_assignment(a);
  return config;
}

}  // namespace

TEST_CASE("batch schedule: both keys of a pair are an error naming both and their sources", "[train][batch]") {
  const auto both = [](const std::vector<std::string>& assignments) { train::check_exclusive_keys(config_with(assignments)); };
  REQUIRE_THROWS_WITH(both({"data.minibatch_size=4", "data.global_batch_size=8"}),
                      Contains("data.minibatch_size (4, from --set) and data.global_batch_size (8, from --set) are both set") &&
                          Contains("--set data.minibatch_size="));
  REQUIRE_THROWS_WITH(both({"train.steps=10", "train.epochs=2"}),
                      Contains("train.steps (10, from --set) and train.epochs (2, from --set) are both set"));
  REQUIRE_THROWS_WITH(both({"train.warmup_steps=5", "train.warmup_ratio=0.1"}),
                      Contains("train.warmup_steps (5, from --set) and train.warmup_ratio (0.1, from --set) are both set"));
  // The loader checks it too (before any data is read); one key of each pair is fine, and a key set
  // in a file can be unset again from the command line.
  REQUIRE_THROWS_WITH(train::load_trainer_config("", {"train.epochs=1", "train.steps=3"}), Contains("are both set"));
  CHECK_NOTHROW(both({"data.global_batch_size=8", "train.epochs=2", "train.warmup_ratio=0.1"}));
  CHECK_NOTHROW(both({"data.minibatch_size=4", "data.minibatch_size=", "data.global_batch_size=8"}));
  // The trainer's entry points check as well: a config built in code meets the same error.
  REQUIRE_THROWS_WITH(train::global_batch_size(config_with({"data.minibatch_size=4", "data.global_batch_size=8"}), 2),
                      Contains("are both set"));
  REQUIRE_THROWS_WITH(train::run_length(config_with({"train.steps=4", "train.epochs=2"}), 10, 2), Contains("are both set"));
}

TEST_CASE("batch schedule: the global batch from either key", "[train][batch]") {
  std::string how;
  CHECK(train::global_batch_size(config_with({}), 3, &how) == 12);  // the default 4 per rank
  CHECK(how == "data.minibatch_size 4 (the default) x 3 ranks");
  CHECK(train::global_batch_size(config_with({"data.minibatch_size=5"}), 2, &how) == 10);
  CHECK(how == "data.minibatch_size 5 x 2 ranks");
  CHECK(train::global_batch_size(config_with({"data.global_batch_size=7"}), 2, &how) == 7);
  CHECK(how == "data.global_batch_size");
  REQUIRE_THROWS_WITH(config_with({"data.global_batch_size=0"}), Contains("must be >= 1, found 0"));
}

TEST_CASE("batch schedule: lb_micro and lb_mini_equal need a multiple of the world size, the other balances do not", "[train][batch]") {
  REQUIRE_THROWS_WITH(train::check_batch_split(7, 2, data::Balance::lb_micro, "data.global_batch_size"),
                      Contains("the global batch of 7 sequences (data.global_batch_size) does not divide over 2 ranks") &&
                          Contains("use a multiple of 2"));
  CHECK_NOTHROW(train::check_batch_split(8, 2, data::Balance::lb_micro, "x"));
  REQUIRE_THROWS_WITH(train::check_batch_split(9, 4, data::Balance::lb_mini_equal, "data.global_batch_size"),
                      Contains("the global batch of 9 sequences (data.global_batch_size) does not divide over 4 ranks: "
                               "data.balance lb_mini_equal gives every rank the same number of sequences") &&
                          Contains("use a multiple of 4 or data.balance lb_mini"));
  CHECK_NOTHROW(train::check_batch_split(12, 4, data::Balance::lb_mini_equal, "x"));
  for (const auto balance : {data::Balance::lb_mini, data::Balance::local_sort, data::Balance::round_robin}) {
    CHECK_NOTHROW(train::check_batch_split(7, 2, balance, "x"));
  }
}

TEST_CASE("batch schedule: epochs take ceil(dataset / batch) steps each, the last with the remainder", "[train][batch]") {
  const auto steps = train::run_length(config_with({"train.steps=17"}), 100, 8);
  CHECK(steps.steps == 17);
  CHECK(steps.epochs == 0);
  CHECK(train::run_length(config_with({}), 100, 8).steps == 200);  // neither key: the default
  const auto epochs = train::run_length(config_with({"train.epochs=3"}), 100, 8);
  CHECK(epochs.epochs == 3);
  CHECK(epochs.steps_per_epoch == 13);  // 12 of 8 and one of 4
  CHECK(epochs.last_step_sequences == 4);
  CHECK(epochs.steps == 39);
  const auto even = train::run_length(config_with({"train.epochs=2"}), 96, 8);
  CHECK(even.steps_per_epoch == 12);
  CHECK(even.last_step_sequences == 8);
  CHECK(even.steps == 24);
  const auto whole = train::run_length(config_with({"train.epochs=1"}), 5, 5);
  CHECK(whole.steps == 1);
}

TEST_CASE("batch schedule: warmup_ratio and wsd's decay_ratio round to the nearest step", "[train][batch]") {
  const auto s = train::lr_schedule(config_with({"train.warmup_ratio=0.3", "train.schedule=wsd", "train.decay_ratio=0.25"}), 10);
  CHECK(s.warmup_steps == 3);  // 0.3 x 10 is 3.0000000000000004 in doubles: rounded, not ceiled
  CHECK(s.decay_steps == 3);   // 2.5 rounds away from zero
  CHECK(s.total_steps == 10);
  CHECK(s.kind == "wsd");
  CHECK(train::lr_schedule(config_with({}), 50).warmup_steps == 20);  // neither key: the default
  CHECK(train::lr_schedule(config_with({"train.warmup_steps=7"}), 50).warmup_steps == 7);
  CHECK(train::lr_schedule(config_with({"train.warmup_ratio=0.05"}), 39).warmup_steps == 2);  // 1.95
  CHECK(train::lr_schedule(config_with({"train.warmup_ratio=0"}), 39).warmup_steps == 0);
  REQUIRE_THROWS_WITH(config_with({"train.warmup_ratio=1.5"}), Contains("must be in [0, 1], found 1.5"));
}

TEST_CASE("batch schedule: keys that shape only what the run does not do are errors as the config loads",
          "[train][batch]") {
  REQUIRE_THROWS_WITH(train::load_trainer_config("", {"train.decay_ratio=0.2"}),
                      Contains("train.decay_ratio (from --set) shapes only train.schedule wsd, but the schedule is cosine"));
  CHECK_NOTHROW(train::load_trainer_config("", {"train.decay_ratio=0.2", "train.schedule=wsd"}));
  REQUIRE_THROWS_WITH(train::load_trainer_config("", {"data.over_length=drop"}),
                      Contains("data.over_length (from --set) says what a sequence longer than data.max_length does, "
                               "but data.max_length is 0 (no limit)"));
  CHECK_NOTHROW(train::load_trainer_config("", {"data.over_length=drop", "data.max_length=64"}));
}

TEST_CASE("batch schedule: --dump-config's resolved lines", "[train][batch]") {
  const std::string global = train::resolved_summary(config_with({"data.global_batch_size=8"}), 2);
  CHECK_THAT(global, Contains("# resolved for 2 ranks:") &&
                         Contains("#   global batch: 8 sequences per step (data.global_batch_size, 4 per rank)") &&
                         Contains("#   steps: 200 (the default)") && Contains("#   warmup: 20 steps (the default)"));
  const std::string uneven = train::resolved_summary(config_with({"data.global_batch_size=7"}), 2);
  CHECK_THAT(uneven, Contains("7 sequences per step (data.global_batch_size, 3.5 per rank on average)"));
  const std::string per_rank =
      train::resolved_summary(config_with({"data.minibatch_size=3", "train.steps=40", "train.warmup_ratio=0.1"}), 1);
  CHECK_THAT(per_rank, Contains("3 sequences per step (data.minibatch_size 3 x 1 rank, 3 per rank)") &&
                           Contains("#   steps: 40\n") && Contains("#   warmup: 4 steps (train.warmup_ratio 0.1)"));
  const std::string epochs =
      train::resolved_summary(config_with({"train.epochs=2", "train.warmup_ratio=0.1", "train.schedule=wsd"}), 1);
  CHECK_THAT(epochs, Contains("train.epochs 2 x ceil(the dataset's sequences / 4), counted at start-up") &&
                         Contains("train.warmup_ratio 0.1 of those steps") && Contains("wsd decay"));
}

TEST_CASE("batch schedule: products of counts beyond int64 are refused naming the keys and the bound", "[train][batch]") {
  // 2^63 - 1 per rank x 2 ranks wrapped to -2 (an internal check then failed on a "batch of -2").
  REQUIRE_THROWS_WITH(train::global_batch_size(config_with({"data.minibatch_size=9223372036854775807"}), 2),
                      Contains("data.minibatch_size 9223372036854775807 (from --set) x 2 ranks is beyond the largest "
                               "count of sequences") &&
                          Contains("on 2 ranks data.minibatch_size must be <= 4611686018427387903"));
  CHECK(train::global_batch_size(config_with({"data.minibatch_size=4611686018427387903"}), 2) == 9223372036854775806);
  // 2^63 - 1 epochs x 8 steps wrapped to -8 steps and 2^61 x 8 to 0: both trained nothing, exit 0.
  for (const char* epochs : {"train.epochs=9223372036854775807", "train.epochs=2305843009213693952"}) {
    REQUIRE_THROWS_WITH(train::run_length(config_with({epochs}), 32, 4),
                        Contains("x 8 steps per epoch (32 sequences in global batches of 4) is beyond the largest count "
                                 "of steps") &&
                            Contains("train.epochs must be <= 1152921504606846975"));
  }
  CHECK(train::run_length(config_with({"train.epochs=1152921504606846975"}), 32, 4).steps == 9223372036854775800);
}
