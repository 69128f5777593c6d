// The training loop's batch and length keys end to end: data.global_batch_size trains what
// data.minibatch_size does; train.epochs visits every sequence once per epoch, its remainder as a
// smaller last step, with the schedule over the derived steps; a run in epochs resumes bit for bit;
// data.max_length drops sequences before the epochs are counted; and the split of a global batch
// over ranks (MinibatchSource for 2 ranks, no MPI needed).
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "odc/core/error.h"
#include "odc/train/config/config_schema.h"
#include "odc/train/run/minibatch_source.h"
#include "odc/train/config/run_settings.h"
#include "odc/train/run/trainer.h"
#include "unit/synthetic_data.h"
#include "unit/temp_dir.h"

using namespace odc;
using Catch::Matchers::Contains;

namespace {

// `count` sequences of 3..31 tokens, the second half of each a target.
std::string write_dataset(const test::TempDir& dir, int count) {
  return dir.write("data.jsonl",
                   test::synthetic_jsonl({count, 7, [](int s, test::Lcg&) { return 3 + (s * 7) % 29; }}));
}

Config config_for(const std::string& data, const std::vector<std::string>& extra) {
  Config config(train::trainer_tunables());
  config.apply_assignment("data.train=" + data);
  config.apply_assignment(test::tiny_trainer_model());
  config.apply_assignment("train.lr=0.001");
  config.apply_assignment("train.peak_flops=1e10");  // skip the start-up sgemm in tests
  config.apply_assignment("data.max_tokens_per_microbatch=40");
  for (const auto& e : extra) config.apply_assignment(e);
  config.validate();
  return config;
}

double total_targets(const std::string& data) {
  const auto dataset = data::open_dataset(data, "tokens", 50);
  double targets = 0;
  for (std::int64_t i = 0; i < dataset->size(); ++i) targets += static_cast<double>(dataset->target_count(i));
  return targets;
}

// A MinibatchSource as the trainer makes it: its settings resolved from `config`.
train::MinibatchSource source(const Config& config, const model::LlamaConfig& model, int rank, int world,
                              distributed::CommKind comm) {
  return train::MinibatchSource(train::resolve_run_settings(config), config, model, rank, world, comm);
}

}  // namespace

TEST_CASE("data.global_batch_size on one rank trains exactly what data.minibatch_size does", "[train][batch]") {
  const test::TempDir dir("epochs_global");
  const std::string data = write_dataset(dir, 24);
  train::Trainer per_rank(config_for(data, {"data.minibatch_size=6", "train.steps=3", "train.warmup_steps=1"}));
  train::Trainer global(config_for(data, {"data.global_batch_size=6", "train.steps=3", "train.warmup_steps=1"}));
  const auto a = per_rank.run();
  const auto b = global.run();
  REQUIRE(a.size() == 3);
  REQUIRE(b.size() == 3);
  for (std::size_t s = 0; s < a.size(); ++s) {
    CHECK(b[s].sequences == 6);
    CHECK(b[s].loss == a[s].loss);  // bitwise: the same draws, plan and sums
    CHECK(b[s].grad_norm == a[s].grad_norm);
  }
}

TEST_CASE("train.epochs: every sequence once per epoch, the remainder as a smaller last step, the schedule over "
          "the derived steps",
          "[train][batch]") {
  const test::TempDir dir("epochs_remainder");
  const std::string data = write_dataset(dir, 24);
  train::Trainer trainer(config_for(data, {"data.global_batch_size=5", "train.epochs=2", "train.warmup_ratio=0.2",
                                           "train.schedule=linear", "train.min_lr=0.0001"}));
  REQUIRE(trainer.length().steps_per_epoch == 5);  // 4 x 5 + 4
  REQUIRE(trainer.length().last_step_sequences == 4);
  REQUIRE(trainer.length().steps == 10);
  const optim::LrSchedule schedule = trainer.schedule();
  CHECK(schedule.total_steps == 10);
  CHECK(schedule.warmup_steps == 2);
  const auto results = trainer.run();
  REQUIRE(results.size() == 10);
  const std::vector<std::int64_t> sizes = {5, 5, 5, 5, 4, 5, 5, 5, 5, 4};
  double epoch_targets[2] = {0, 0};
  for (std::size_t s = 0; s < results.size(); ++s) {
    INFO("step " << s);
    CHECK(results[s].sequences == sizes[s]);
    CHECK(results[s].lr == schedule.at(static_cast<std::int64_t>(s)));
    epoch_targets[s / 5] += results[s].target_tokens;
  }
  // Each epoch's steps together saw every target of the dataset once (nothing dropped, nothing
  // repeated: epochs are shuffled differently, and a step never reaches into the next epoch).
  CHECK(epoch_targets[0] == total_targets(data));
  CHECK(epoch_targets[1] == total_targets(data));
  CHECK(results[9].lr == Approx(0.001 - 0.0009 * 7.0 / 8.0).epsilon(1e-12));  // linear: p = (9 - 2) / (10 - 2)
}

TEST_CASE("train.epochs: a run stopped inside an epoch resumes bit for bit", "[train][batch][checkpoint]") {
  const test::TempDir dir("epochs_resume");
  const std::string data = write_dataset(dir, 24);
  const std::vector<std::string> common = {"data.global_batch_size=5", "train.epochs=2", "train.warmup_steps=2",
                                           "train.schedule=wsd", "train.decay_ratio=0.3"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), common.begin(), common.end());
    return config_for(data, extra);
  };
  train::Trainer straight(with({"checkpoint.resume=never"}));
  const auto all = straight.run();
  REQUIRE(all.size() == 10);
  const std::string ckpt = "checkpoint.dir=" + dir.file("ckpt");
  {
    train::Trainer first(with({ckpt, "train.stop_at_step=7"}));
    REQUIRE(first.run().size() == 7);
  }
  train::Trainer second(with({ckpt}));
  REQUIRE(second.steps_done() == 7);
  const auto rest = second.run();
  REQUIRE(rest.size() == 3);
  for (std::size_t i = 0; i < rest.size(); ++i) {
    INFO("step " << i + 8);
    CHECK(rest[i].sequences == all[i + 7].sequences);
    CHECK(rest[i].lr == all[i + 7].lr);
    CHECK(rest[i].loss == all[i + 7].loss);  // bitwise: one rank, same order of every sum
    CHECK(rest[i].grad_norm == all[i + 7].grad_norm);
  }
}

TEST_CASE("data.max_length drop: the epochs count the sequences that remain", "[train][batch][length]") {
  const test::TempDir dir("epochs_drop");
  const std::string data = write_dataset(dir, 24);
  const auto dataset = data::open_dataset(data, "tokens", 50);
  std::int64_t kept = 0;
  for (std::int64_t i = 0; i < dataset->size(); ++i) kept += dataset->length(i) <= 20 ? 1 : 0;
  REQUIRE(kept < 24);
  train::Trainer trainer(config_for(data, {"data.global_batch_size=4", "train.epochs=1", "data.max_length=20",
                                           "data.over_length=drop"}));
  CHECK(trainer.length().steps == (kept + 3) / 4);
  CHECK(trainer.token_cap() == 40);
  REQUIRE_THROWS_WITH(train::Trainer(config_for(data, {"data.global_batch_size=4", "train.steps=1", "data.max_length=20"})),
                      Contains(data + ":4: the sequence has 24 tokens, more than data.max_length = 20"));
}

TEST_CASE("a global batch over 2 ranks: lb_micro needs a multiple, an epoch's odd remainder is planned with "
          "local_sort",
          "[train][batch]") {
  const test::TempDir dir("epochs_split");
  const std::string data = write_dataset(dir, 9);
  const model::LlamaConfig model = train::model_config_from(config_for(data, {}));
  REQUIRE_THROWS_WITH(source(config_for(data, {"data.global_batch_size=7"}), model, 0, 2,
                                             distributed::CommKind::collective),
                      Contains("the global batch of 7 sequences (data.global_batch_size) does not divide over 2 ranks"));
  // ODC's lb_mini splits 7 over 2 ranks: every sequence on exactly one rank.
  auto odd = source(config_for(data, {"data.global_batch_size=7"}), model, 0, 2, distributed::CommKind::odc);
  const auto seven = odd.next(false);
  std::size_t placed = 0;
  for (const auto& rank : seven.plan.ranks) {
    for (const auto& microbatch : rank.microbatches) placed += microbatch.size();
  }
  CHECK(seven.global.size() == 7);
  CHECK(placed == 7);
  // 9 sequences in steps of 4 under lb_micro (collective): 4, 4, then 1, which no equal split
  // holds; that step runs as local_sort, the empty rank padded to the other's microbatch count.
  auto epochs = source(config_for(data, {"data.global_batch_size=4", "train.epochs=1"}), model, 1, 2,
                                distributed::CommKind::collective);
  CHECK(epochs.next(true).global.size() == 4);
  CHECK(epochs.next(true).global.size() == 4);
  const auto last = epochs.next(true);
  REQUIRE(last.global.size() == 1);
  CHECK(last.plan.ranks[0].microbatches.size() == 1);
  CHECK(last.plan.ranks[1].microbatches.empty());
  CHECK(last.mine.size() == 1);  // rank 1's padding microbatch
  CHECK(last.mine[0].empty());
  CHECK(last.padded == 1);
  CHECK(epochs.next(true).global.size() == 4);  // the next epoch starts whole
}

TEST_CASE("data.balance lb_mini_equal: odc only, a multiple of the world size, n / ranks sequences on every rank",
          "[train][batch]") {
  const test::TempDir dir("epochs_mini_equal");
  const std::string data = write_dataset(dir, 9);
  const model::LlamaConfig model = train::model_config_from(config_for(data, {}));
  // Collectives need equal microbatch counts, which lb_mini_equal does not promise.
  REQUIRE_THROWS_WITH(
      source(config_for(data, {"data.balance=lb_mini_equal", "data.global_batch_size=8"}), model, 0,
                             2, distributed::CommKind::collective),
      Contains("data.balance = lb_mini_equal needs train.comm = odc"));
  CHECK_NOTHROW(source(config_for(data, {"data.balance=lb_mini_equal", "data.global_batch_size=8"}),
                                       model, 0, 1, distributed::CommKind::collective));  // one rank: no barrier
  REQUIRE_THROWS_WITH(
      source(config_for(data, {"data.balance=lb_mini_equal", "data.global_batch_size=7"}), model, 0,
                             2, distributed::CommKind::odc),
      Contains("the global batch of 7 sequences (data.global_batch_size) does not divide over 2 ranks: data.balance "
               "lb_mini_equal"));
  auto even = source(config_for(data, {"data.balance=lb_mini_equal", "data.global_batch_size=8"}), model, 1,
                              2, distributed::CommKind::odc);
  CHECK(even.balance() == data::Balance::lb_mini_equal);
  const auto eight = even.next(false);
  REQUIRE(eight.plan.ranks.size() == 2);
  for (const auto& rank : eight.plan.ranks) {
    std::size_t sequences = 0;
    for (const auto& microbatch : rank.microbatches) sequences += microbatch.size();
    CHECK(sequences == 4);
  }
  CHECK(eight.mine == eight.plan.ranks[1].microbatches);
  CHECK(eight.padded == 0);
  // 9 sequences in steps of 4: the last step's 1 sequence has no equal split and runs as local_sort.
  auto epochs = source(config_for(data, {"data.balance=lb_mini_equal", "data.global_batch_size=4",
                                                  "train.epochs=1"}),
                                model, 0, 2, distributed::CommKind::odc);
  CHECK(epochs.next(false).global.size() == 4);
  CHECK(epochs.next(false).global.size() == 4);
  const auto last = epochs.next(false);
  REQUIRE(last.global.size() == 1);
  CHECK(last.plan.ranks[0].microbatches == std::vector<std::vector<std::int64_t>>{{0}});
  CHECK(last.plan.ranks[1].microbatches.empty());
}
