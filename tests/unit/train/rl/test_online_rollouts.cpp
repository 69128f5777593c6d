// OnlineRollouts, the sampling half of the online RL loop: an iteration's records are the same on
// one rank and on two (prompt j on rank j mod world, each completion seeded by its position, the
// records gathered in position order; bitwise with one sequence decoding at a time), iterations
// walk through the prompts in data.seed's order, the records read back as rollouts whose
// advantages come from the rewards, a reference equal to the policy gives ref_logprobs equal to
// the sampling log-probabilities (1e-5: a full forward against the decode path's), a global
// batch that does not divide an iteration's rollouts, a group of one and prompts beyond the model's
// attention window are refused, and a stop request on rank 0 ends the reward command on every rank.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "odc/backend/cpu_backend.h"
#include "odc/core/error.h"
#include "odc/data/rollouts.h"
#include "odc/model/llama_model.h"
#include "odc/train/rl/online_rollouts.h"
#include "support/resident_weights.h"
#include "unit/data/tiny_tokenizer_json.h"
#include "unit/rank_threads.h"
#include "unit/temp_dir.h"

using namespace odc;

namespace {

model::LlamaConfig tiny() {
  return model::LlamaConfig::from_json(
      {{"vocab_size", 304}, {"hidden_size", 32}, {"intermediate_size", 48}, {"num_hidden_layers", 2},
       {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"rms_norm_eps", 1e-5},
       {"max_position_embeddings", 64}, {"initializer_range", 0.5}},
      "test", true);
}

struct Fixture {
  test::TempDir dir{"online_rollouts"};
  train::RunSettings settings;
  Fixture() {
    settings.data.tokenizer = dir.write("tokenizer.json", test::tiny_tokenizer(test::kChatml).dump());
    settings.rl.prompts = dir.write("prompts.jsonl",
                                    "{\"prompt\": \"ab\", \"answer\": \"x\"}\n{\"prompt\": \"cde\", \"answer\": \"y\"}\n"
                                    "{\"prompt\": \"f\", \"answer\": \"z\"}\n{\"prompt\": \"ghij\", \"answer\": \"w\"}\n"
                                    "{\"prompt\": \"kl\", \"answer\": \"v\"}\n{\"prompt\": \"mno\", \"answer\": \"u\"}\n");
    settings.rl.prompts_per_iteration = 3;
    settings.rl.group_size = 2;
    settings.rl.max_new_tokens = 5;
    settings.rl.concurrency = 1;  // one sequence per forward: bitwise the same on any world size
    settings.rl.seed = 4;
    settings.data.seed = 7;
    settings.objective.policy.temperature = 0.9;
  }
};

}  // namespace

TEST_CASE("online rollouts: the same records on 1 and 2 ranks, prompts in data.seed's order", "[train][rl]") {
  Fixture f;
  const auto config = tiny();
  const auto sample = [&](int world, std::int64_t iteration) {
    std::vector<std::string> records(static_cast<std::size_t>(world));
    std::mutex mutex;
    const auto errors = test::on_every_rank(world, [&](distributed::HostGroup& group) {
      model::LlamaModel m(config, std::make_unique<backend::CpuBackend>());
      bench::ResidentWeights weights(m.units(), config, 9);
      const train::OnlineRollouts online(f.settings, config, group.rank(), group.size());
      auto out = online.sample(iteration, m, weights, group);
      const std::lock_guard lock(mutex);
      records[static_cast<std::size_t>(group.rank())] = data::rollout_records_jsonl(out.records);
    });
    for (const auto& e : errors) REQUIRE(e.empty());
    for (const auto& r : records) REQUIRE(r == records[0]);  // every rank holds the iteration's records
    return records[0];
  };
  const std::string one = sample(1, 0);
  CHECK(sample(2, 0) == one);
  // 3 prompts x 2 completions, groups by position, records that train as rollouts.
  std::istringstream in(one);
  const data::RolloutDataset rollouts("iteration 1", in, config.vocab_size);
  REQUIRE(rollouts.size() == 6);
  CHECK(rollouts.temperature() == 0.9);
  std::set<std::string> prompts;
  std::istringstream lines(one);
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) {
    const auto r = nlohmann::json::parse(line);
    CHECK(r.at("group").get<int>() == n / 2);
    CHECK(r.at("completion_ids").size() == 5);  // no eos in the tiny model's config
    CHECK(r.at("logprobs").size() == 5);
    prompts.insert(r.at("prompt_ids").dump());
    ++n;
  }
  CHECK(prompts.size() == 3);
  // The next iteration takes the other 3 prompts (one epoch of the 6 in data.seed's order).
  std::istringstream next(sample(1, 1));
  while (std::getline(next, line)) CHECK(prompts.count(nlohmann::json::parse(line).at("prompt_ids").dump()) == 0);
}

TEST_CASE("online rollouts: a reference equal to the policy scores each token as the sampler did", "[train][rl]") {
  Fixture f;
  f.settings.rl.concurrency = 4;
  const auto config = tiny();
  model::LlamaModel m(config, std::make_unique<backend::CpuBackend>());
  bench::ResidentWeights weights(m.units(), config, 9);
  const train::OnlineRollouts online(f.settings, config, 0, 1);
  auto drawn = online.draw(0, m, weights);
  REQUIRE(drawn.completions.size() == 6);
  online.add_reference(drawn, m, weights, /*token_cap=*/12);  // several forwards of packed sequences
  double worst = 0.0;
  for (std::size_t i = 0; i < drawn.completions.size(); ++i) {
    REQUIRE(drawn.ref_logprobs[i].size() == drawn.completions[i].logprobs.size());
    for (std::size_t t = 0; t < drawn.ref_logprobs[i].size(); ++t) {
      worst = std::max(worst, std::abs(static_cast<double>(drawn.ref_logprobs[i][t] - drawn.completions[i].logprobs[t])));
    }
  }
  CHECK(worst < 1e-5);
  auto group = distributed::InProcessGroup::create(1);
  const auto gathered = online.gather(std::move(drawn), *group.front());
  REQUIRE(gathered.has_value());
  const auto& out = *gathered;
  const data::RolloutDataset rollouts("iteration 1", out.records, config.vocab_size);
  CHECK(rollouts.has_ref_logprobs());
  // The records in memory train as their JSONL (a checkpoint's rollouts file) reads back.
  std::istringstream in(data::rollout_records_jsonl(out.records));
  const data::RolloutDataset read_back("iteration 1", in, config.vocab_size);
  REQUIRE(read_back.size() == rollouts.size());
  for (std::int64_t i = 0; i < rollouts.size(); ++i) {
    const auto a = *rollouts.policy(i);
    const auto b = *read_back.policy(i);
    CHECK(a.advantage == b.advantage);
    CHECK(std::equal(a.logprobs.begin(), a.logprobs.end(), b.logprobs.begin(), b.logprobs.end()));
    CHECK(std::equal(a.ref_logprobs.begin(), a.ref_logprobs.end(), b.ref_logprobs.begin(), b.ref_logprobs.end()));
    CHECK(rollouts.record(i) == read_back.record(i));
  }
  CHECK(out.stats.at("rollouts").get<int>() == 6);
  CHECK(out.stats.at("completion_tokens_mean").get<double>() == 5.0);
}

TEST_CASE("online rollouts: the global batch must divide an iteration's rollouts", "[train][rl]") {
  Fixture f;
  const train::OnlineRollouts online(f.settings, tiny(), 0, 1);
  CHECK(online.rollouts_per_iteration() == 6);
  CHECK(online.steps_per_iteration(3, "data.global_batch_size") == 2);
  CHECK_THROWS_WITH(online.steps_per_iteration(4, "data.global_batch_size"),
                    Catch::Contains("3 x 2 = 6 rollouts per iteration, which do not divide into global batches of 4 "
                                    "sequences (data.global_batch_size)"));
  CHECK(online.max_sequence_length() == 4 + 5);  // "ghij" (4 byte tokens) + rl.max_new_tokens
}

TEST_CASE("online rollouts: a group of one, a window too short, a stopped reward command", "[train][rl]") {
  Fixture f;
  f.settings.rl.group_size = 1;
  CHECK_THROWS_WITH(train::OnlineRollouts(f.settings, tiny(), 0, 1),
                    Catch::Contains("rl.group_size is 1") && Catch::Contains("set rl.group_size to at least 2"));
  f.settings.rl.group_size = 2;
  auto windowed = tiny();
  windowed.attention_window = 8;  // "ghij" (4 tokens) + rl.max_new_tokens 5 = 9
  CHECK_THROWS_WITH(train::OnlineRollouts(f.settings, windowed, 0, 1),
                    Catch::Contains("prompts.jsonl:4: the prompt has 4 tokens and rl.max_new_tokens is 5: 9 tokens, "
                                    "more than the model's attention window of 8"));
  // rank 0's stop request kills the reward command; every rank drops the iteration, none hangs.
  f.settings.rl.reward_command = "sleep 60";
  const auto config = tiny();
  std::mutex mutex;
  int stopped = 0;
  const auto errors = test::on_every_rank(2, [&](distributed::HostGroup& group) {
    model::LlamaModel m(config, std::make_unique<backend::CpuBackend>());
    bench::ResidentWeights weights(m.units(), config, 9);
    const train::OnlineRollouts online(f.settings, config, group.rank(), group.size());
    const auto out = online.gather(online.draw(0, m, weights), group, [] { return true; });
    const std::lock_guard lock(mutex);
    stopped += out.has_value() ? 0 : 1;
  });
  for (const auto& e : errors) CHECK(e.empty());
  CHECK(stopped == 2);
}
