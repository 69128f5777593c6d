// RolloutDataset (data.format rollouts): sequences are prompt + completion with the completion as
// the only targets, the log-probabilities sit on the completion's tokens, advantages come from
// rewards per group as TRL's GRPOTrainer computes them (worked out by hand here), and every bad
// record is an odc::Error naming file:line (a group of one record too); huge rewards do not overflow
// the advantages.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "odc/core/error.h"
#include "odc/data/dataset.h"
#include "odc/data/length_limit.h"
#include "odc/data/rollouts.h"
#include "unit/temp_dir.h"

using odc::data::RewardScale;
using odc::data::RolloutDataset;
using odc::data::RolloutRecord;
using odc::data::rollout_records_jsonl;

namespace {

struct TempDir : odc::test::TempDir {
  TempDir() : odc::test::TempDir("rollouts") {}
};

std::string record(const std::string& prompt, const std::string& completion, const std::string& logprobs,
                   const std::string& tail) {
  return "{\"prompt_ids\": [" + prompt + "], \"completion_ids\": [" + completion + "], \"logprobs\": [" + logprobs +
         "], " + tail + "}\n";
}

}  // namespace

TEST_CASE("rollouts: prompt + completion, targets on the completion, log-probabilities on its tokens", "[data][rl]") {
  TempDir dir;
  const std::string path = dir.write("r.jsonl", record("1, 2, 3", "4, 5", "-0.5, -1.5", "\"advantage\": 0.75") +
                                                    "\n" + record("6", "7", "-2", "\"advantage\": -1"));
  const auto dataset = odc::data::open_dataset(path, "rollouts", 16);
  REQUIRE(dataset->size() == 2);
  const auto seq = dataset->get(0);
  CHECK(std::vector<int>(seq.tokens.begin(), seq.tokens.end()) == std::vector<int>{1, 2, 3, 4, 5});
  CHECK(std::vector<int>(seq.target_mask.begin(), seq.target_mask.end()) == std::vector<int>{0, 0, 0, 1, 1});
  CHECK(dataset->target_count(0) == 2);
  CHECK(dataset->record(1) == path + ":3");
  const auto policy = dataset->policy(0);
  REQUIRE(policy.has_value());
  CHECK(std::vector<float>(policy->logprobs.begin(), policy->logprobs.end()) ==
        std::vector<float>{0.0f, 0.0f, 0.0f, -0.5f, -1.5f});
  CHECK(policy->ref_logprobs.empty());
  CHECK(policy->advantage == 0.75f);
  CHECK(dataset->policy(1)->advantage == -1.0f);

  // Truncation (data.max_length) cuts the log-probabilities with the tokens.
  const auto cut = odc::data::limit_lengths(odc::data::open_dataset(path, "rollouts", 16),
                                            odc::data::LengthLimit{4, odc::data::OverLength::truncate});
  CHECK(cut->policy(0)->logprobs.size() == 4);
  CHECK(cut->target_count(0) == 1);
}

TEST_CASE("rollouts: group-relative advantages with TRL's scaling", "[data][rl]") {
  // Group 0: rewards 1, 0, 0, 1 -> mean 0.5, Bessel std sqrt(1/3); group 1: 2, 4 -> mean 3, std sqrt(2);
  // group 2: one sample -> no spread, advantage 0.
  const std::vector<double> rewards{1, 0, 2, 0, 1, 4, 7};
  const std::vector<std::int64_t> groups{0, 0, 1, 0, 0, 1, 2};
  const auto a = odc::data::group_advantages(rewards, groups, RewardScale::group);
  const double s0 = std::sqrt(1.0 / 3.0), s1 = std::sqrt(2.0);
  CHECK(a[0] == Approx(0.5 / (s0 + 1e-4)));
  CHECK(a[1] == Approx(-0.5 / (s0 + 1e-4)));
  CHECK(a[2] == Approx(-1.0 / (s1 + 1e-4)));
  CHECK(a[5] == Approx(1.0 / (s1 + 1e-4)));
  CHECK(a[6] == 0.0f);
  const auto none = odc::data::group_advantages(rewards, groups, RewardScale::none);
  CHECK(none[2] == Approx(-1.0));
  CHECK(none[6] == 0.0f);
  // batch: the group's mean, the std of all seven rewards.
  double mean = 0.0, sq = 0.0;
  for (double r : rewards) mean += r / 7.0;
  for (double r : rewards) sq += (r - mean) * (r - mean);
  const auto batch = odc::data::group_advantages(rewards, groups, RewardScale::batch);
  CHECK(batch[0] == Approx(0.5 / (std::sqrt(sq / 6.0) + 1e-4)));

  TempDir dir;
  const std::string path = dir.write("g.jsonl", record("1", "2", "-1", "\"reward\": 1, \"group\": 3") +
                                                    record("1", "3", "-1", "\"reward\": 0, \"group\": 3"));
  const RolloutDataset dataset(path, 8);
  CHECK(dataset.policy(0)->advantage == Approx(0.5 / (std::sqrt(0.5) + 1e-4)));
  CHECK(dataset.reward_mean() == Approx(0.5));
}

TEST_CASE("rollouts: every bad record is an error naming file:line", "[data][rl]") {
  TempDir dir;
  const auto fails = [&](const std::string& text, const std::string& expected) {
    const std::string path = dir.write("bad.jsonl", text);
    CHECK_THROWS_WITH(RolloutDataset(path, 16), Catch::Contains(expected) && Catch::Contains("bad.jsonl:"));
  };
  fails(record("1", "2, 3", "-1", "\"advantage\": 1"), "\"logprobs\" has 1 values but \"completion_ids\" has 2");
  fails(record("1", "2", "0.5", "\"advantage\": 1"), "is not a log-probability");
  fails(record("", "2", "-1", "\"advantage\": 1"), "\"prompt_ids\" is empty");
  fails(record("1", "99", "-1", "\"advantage\": 1"), "completion_ids[0] = 99 is not a token id in [0, 16)");
  fails(record("1", "2", "-1", "\"reward\": 1"), "\"reward\" needs \"group\"");
  fails(record("1", "2", "-1", "\"reward\": 1, \"group\": 0, \"advantage\": 1"), "not both");
  fails(record("1", "2", "-1", "\"group\": 0"), "found neither");
  fails(record("1", "2", "-1", "\"advantage\": 1") + record("1", "2", "-1", "\"reward\": 1, \"group\": 0"),
        "one file, one kind");
  fails(record("1", "2", "-1", "\"advantage\": 1, \"ref_logprobs\": [-1]") + record("1", "2", "-1", "\"advantage\": 1"),
        "give it on every record or on none");
  fails(record("1", "2", "-1", "\"advantage\": 1, \"rewrd\": 2"), "did you mean \"reward\"?");
  fails("{\"prompt_ids\": [1]\n", "malformed JSON");
}

TEST_CASE("rollouts: records from a stream read as from a file, named by the stream's name", "[data][rl]") {
  TempDir dir;
  const std::string text = record("1, 2", "3, 4", "-0.5, -1.5", "\"reward\": 1, \"group\": 0") +
                           record("1, 2", "5", "-2", "\"reward\": 0, \"group\": 0") +
                           record("6", "7, 8", "-1, -1", "\"reward\": 1, \"group\": 1") +
                           record("6", "9", "-1", "\"reward\": 0, \"group\": 1");
  const std::string path = dir.write("r.jsonl", text);
  const RolloutDataset from_file(path, 16);
  std::istringstream in(text);
  const RolloutDataset from_stream("iteration 3's rollouts", in, 16);
  REQUIRE(from_stream.size() == from_file.size());
  for (std::int64_t i = 0; i < from_file.size(); ++i) {
    const auto a = from_file.get(i), b = from_stream.get(i);
    CHECK(std::vector<int>(a.tokens.begin(), a.tokens.end()) == std::vector<int>(b.tokens.begin(), b.tokens.end()));
    CHECK(from_file.policy(i)->advantage == from_stream.policy(i)->advantage);
    CHECK(std::vector<float>(from_file.policy(i)->logprobs.begin(), from_file.policy(i)->logprobs.end()) ==
          std::vector<float>(from_stream.policy(i)->logprobs.begin(), from_stream.policy(i)->logprobs.end()));
  }
  CHECK(from_stream.record(2) == "iteration 3's rollouts:3");
  std::istringstream bad(record("1", "99", "-1", "\"advantage\": 1"));
  CHECK_THROWS_WITH(RolloutDataset("stream", bad, 16), Catch::Contains("stream:1: completion_ids[0] = 99 is not a token id"));
}

TEST_CASE("rollouts: advantages of huge and tiny rewards are those of small ones in the same ratios", "[data][rl]") {
  const std::vector<std::int64_t> groups{0, 0, 0, 0, 1, 1};
  const auto small = odc::data::group_advantages({1, 0, 1, 0, 2, -1}, groups, RewardScale::group);
  // The squares of 1e200 overflow a double: the std was inf and every advantage 0 (loss 0, exit 0).
  // Scaled, each group's advantages are the small rewards' up to the 1e-4 in the denominator
  // (relative to the std there: 1e-4 / std on the small ones, nothing on the big), so 2e-4.
  for (const double big : {1e200, 1e308}) {
    const auto a = odc::data::group_advantages({big, 0, big, 0, 2 * (big / 2), -(big / 2)}, groups, RewardScale::group);
    for (std::size_t i = 0; i < a.size(); ++i) {
      INFO(big << " " << i);
      CHECK(std::isfinite(a[i]));
      CHECK(a[i] == Approx(small[i]).epsilon(2e-4));
    }
    const auto b = odc::data::group_advantages({big, 0, big, 0, 2 * (big / 2), -(big / 2)}, groups, RewardScale::batch);
    for (const double x : b) CHECK(std::isfinite(x));
  }
  // +-max double: the deviation is finite in the group's units.
  const auto extreme = odc::data::group_advantages({1.7e308, -1.7e308}, {0, 0}, RewardScale::group);
  CHECK(extreme[0] == Approx(1 / std::sqrt(2.0)));
  CHECK(extreme[1] == Approx(-1 / std::sqrt(2.0)));
  // Tiny rewards: the 1e-4 dominates, as it does in TRL's formula.
  const auto tiny = odc::data::group_advantages({1e-300, 0}, {0, 0}, RewardScale::group);
  CHECK(tiny[0] == Approx(5e-301 / 1e-4));

  // Unscaled (rl.scale_rewards none), an advantage beyond a float is refused by name.
  TempDir dir;
  const std::string path = dir.write("big.jsonl", record("1", "2", "-1", "\"reward\": 1e200, \"group\": 0") +
                                                      record("1", "3", "-1", "\"reward\": 0, \"group\": 0"));
  CHECK(RolloutDataset(path, 8).policy(0)->advantage == Approx(1 / (std::sqrt(2.0) + 1e-204)));
  CHECK_THROWS_WITH(RolloutDataset(path, 8, RewardScale::none),
                    Catch::Contains("big.jsonl:1: the advantage of this record, 5e+199") &&
                        Catch::Contains("beyond the range of a float"));
  const std::string given = dir.write("given.jsonl", record("1", "2", "-1", "\"advantage\": 1e39"));
  CHECK_THROWS_WITH(RolloutDataset(given, 8), Catch::Contains("given.jsonl:1: \"advantage\" 1e+39 is beyond the range of a float"));
}

TEST_CASE("rollouts: a group of one record is refused, naming it", "[data][rl]") {
  TempDir dir;
  const std::string path = dir.write("lone.jsonl", record("1", "2", "-1", "\"reward\": 1, \"group\": 0") +
                                                       record("1", "3", "-1", "\"reward\": 0, \"group\": 0") +
                                                       record("4", "5", "-1", "\"reward\": 1, \"group\": 7"));
  CHECK_THROWS_WITH(RolloutDataset(path, 8), Catch::Contains("lone.jsonl:3: group 7 has this record alone") &&
                                                 Catch::Contains("a lone completion gets 0 and trains nothing"));
}

TEST_CASE("rollouts: the spread of rewards over all and within groups", "[data][rl]") {
  // Two groups of equal rewards: a spread over all (0.5), none within groups: no signal.
  const auto equal = odc::data::reward_spread({0, 0, 1, 1}, {0, 0, 1, 1});
  CHECK(equal.mean == 0.5);
  CHECK(equal.std == 0.5);
  CHECK(equal.std_within_groups == 0.0);
  CHECK(equal.groups == 2);
  CHECK(equal.equal_groups == 2);
  // Group 0: 1, 0 (Bessel std sqrt(0.5)); group 1: 2, 2.
  const auto mixed = odc::data::reward_spread({1, 0, 2, 2}, {0, 0, 1, 1});
  CHECK(mixed.std_within_groups == Approx(std::sqrt(0.5) / 2));
  CHECK(mixed.equal_groups == 1);
  const auto huge = odc::data::reward_spread({1e308, -1e308}, {0, 0});
  CHECK(huge.mean == 0.0);
  CHECK(huge.std == Approx(1e308));
}

// Rewards 1e-300 and 0 differ, but their advantage rounds to 0 in float: the warning said "the
// rewards of each group are equal" while the iteration's line counted 0 groups of equal rewards.
TEST_CASE("rollouts: an advantage of 0 says whether its group's rewards differ", "[data][rl]") {
  TempDir dir;
  const std::string tiny = dir.write("tiny.jsonl", record("1", "2", "-1", "\"reward\": 1e-300, \"group\": 0") +
                                                       record("1", "3", "-1", "\"reward\": 0, \"group\": 0") +
                                                       record("1", "2", "-1", "\"reward\": 1, \"group\": 1") +
                                                       record("1", "3", "-1", "\"reward\": 1, \"group\": 1"));
  for (const auto scale : {RewardScale::group, RewardScale::batch, RewardScale::none}) {
    const RolloutDataset rollouts(tiny, 8, scale);
    for (std::int64_t i = 0; i < 4; ++i) {
      INFO(i);
      CHECK(rollouts.policy(i)->advantage == 0.0f);
      CHECK(rollouts.policy(i)->rewards_differ == (i < 2));  // group 0 differs, group 1 is equal
    }
  }
}

TEST_CASE("rollouts: typed records in memory train as their JSONL lines read back, and are checked alike",
          "[data][rl]") {
  std::vector<RolloutRecord> records;
  for (std::int64_t g = 0; g < 2; ++g) {
    for (int s = 0; s < 2; ++s) {
      RolloutRecord r;
      r.prompt_ids = {1, 2, static_cast<std::int32_t>(3 + g)};
      r.completion_ids = {4, static_cast<std::int32_t>(5 + s)};
      r.logprobs = {-0.1f * static_cast<float>(s + 1), -1.0f / 3.0f};
      r.ref_logprobs = std::vector<float>{-0.2f, -0.7f};
      r.reward = 0.1 * static_cast<double>(s) + 1e-3 * static_cast<double>(g);
      r.group = g;
      r.temperature = 0.7;
      records.push_back(r);
    }
  }
  const RolloutDataset typed("the rollouts of iteration 1", records, 10);
  std::istringstream in(rollout_records_jsonl(records));
  const RolloutDataset text("the rollouts of iteration 1", in, 10);
  REQUIRE(typed.size() == text.size());
  CHECK(typed.reward_mean() == text.reward_mean());
  CHECK(typed.temperature() == text.temperature());
  for (std::int64_t i = 0; i < typed.size(); ++i) {
    CHECK(typed.record(i) == text.record(i));  // "the rollouts of iteration 1:N"
    const auto a = *typed.policy(i);
    const auto b = *text.policy(i);
    CHECK(a.advantage == b.advantage);
    CHECK(std::equal(a.logprobs.begin(), a.logprobs.end(), b.logprobs.begin(), b.logprobs.end()));
    CHECK(std::equal(a.ref_logprobs.begin(), a.ref_logprobs.end(), b.ref_logprobs.begin(), b.ref_logprobs.end()));
  }
  auto bad = records;
  bad[2].completion_ids[1] = 10;
  CHECK_THROWS_WITH(RolloutDataset("it", bad, 10), Catch::Contains("it:3") && Catch::Contains("completion_ids[1] = 10"));
  bad = records;
  bad[1].ref_logprobs.reset();
  CHECK_THROWS_WITH(RolloutDataset("it", bad, 10), Catch::Contains("it:2") && Catch::Contains("ref_logprobs"));
  bad = records;
  bad[3].group = 7;
  CHECK_THROWS_WITH(RolloutDataset("it", bad, 10), Catch::Contains("group 1 has this record alone"));
}
