// The built-in verifiers: exact match up to the end-of-turn marker and surrounding whitespace;
// number match on the last number (sign, fraction, digit-group commas; values compared). An external
// reward command: its lines read strictly, its failures and its timeout told in words, its files
// removed on every path.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "odc/core/error.h"
#include "odc/train/run/minibatch_source.h"
#include "odc/train/rollout/rewards.h"
#include "unit/temp_dir.h"

using namespace odc::train;

TEST_CASE("rewards: exact match cuts at the end-of-turn marker and strips whitespace", "[train][rl]") {
  CHECK(exact_match_reward(" elppa<|im_end|>\n", "elppa") == 1.0);
  CHECK(exact_match_reward("elppa</s>junk", " elppa ") == 1.0);
  CHECK(exact_match_reward("elppa!", "elppa") == 0.0);
  CHECK(exact_match_reward("", "elppa") == 0.0);
  CHECK(exact_match_reward("<|eot_id|>elppa", "elppa") == 0.0);  // nothing before the marker
}

TEST_CASE("rewards: number match compares the completion's last number with the answer's", "[train][rl]") {
  CHECK(number_match_reward("so 2 + 3 = 5", "5") == 1.0);
  CHECK(number_match_reward("the answer is 3.50.", "3.5") == 1.0);
  CHECK(number_match_reward("total: 1,234", "1234") == 1.0);
  CHECK(number_match_reward("it is -7", "-7") == 1.0);
  CHECK(number_match_reward("it is 7", "-7") == 0.0);
  CHECK(number_match_reward("5 then 6", "5") == 0.0);
  CHECK(number_match_reward("no number", "5") == 0.0);
  CHECK(number_match_reward("5<|im_end|> 6", "5") == 1.0);
  CHECK_THROWS_WITH(number_match_reward("5", "five"), Catch::Contains("holds no number"));
  CHECK(last_number("a 1.5b 2,000 c") == 2000.0);
  CHECK_FALSE(last_number("none").has_value());
  CHECK_THROWS_WITH(parse_verifier("regex"), Catch::Contains("choices: exact, number"));
}

TEST_CASE("rewards: a reward line is one finite number and nothing else", "[train][rl]") {
  for (const auto& [text, value] : std::vector<std::pair<std::string, double>>{
           {"1", 1.0}, {" 0.5 ", 0.5}, {"-2e-3", -2e-3}, {"+1", 1.0}, {"\t3\r", 3.0}, {".5", 0.5}, {"1.", 1.0}, {"1E2", 100.0}}) {
    INFO(text);
    CHECK(parse_reward(text) == value);
  }
  // Once read as 0, 90, 1.0, 16 (std::stod stops at the first character it cannot take).
  for (const std::string text : {"0,9", "90%", "1.0 extra", "0x10", "nan", "inf", "-inf", "1e999", "", "+-1", "--1",
                                 "1 2", "one", "+", "."}) {
    INFO(text);
    CHECK_FALSE(parse_reward(text).has_value());
  }
}

namespace {

std::vector<nlohmann::json> two_requests() {
  return {{{"prompt", "p"}, {"completion", "a"}, {"answer", "x"}}, {{"prompt", "p"}, {"completion", "b"}, {"answer", "x"}}};
}

bool empty_dir(const std::filesystem::path& dir) { return std::filesystem::is_empty(dir); }

}  // namespace

TEST_CASE("rewards: a reward command's failures, in words, and no file left behind", "[train][rl]") {
  const odc::test::TempDir dir("reward_command");
  const std::string noexec = dir.write("noexec.sh", "echo 1\n");
  const auto scratch = dir.path() / "scratch";
  std::filesystem::create_directories(scratch);
  const auto run = [&](const std::string& command, double timeout_s = 10.0) {
    return command_rewards(RewardCommand{command, timeout_s, "--reward-timeout", scratch, {}}, two_requests());
  };
  CHECK(run("while read -r line; do echo 0.25; done") == std::vector<double>{0.25, 0.25});
  CHECK(empty_dir(scratch));
  const auto fails = [&](const std::string& command, const std::string& expected, double timeout_s = 10.0) {
    INFO(command);
    CHECK_THROWS_WITH(run(command, timeout_s), Catch::Contains(expected) && Catch::Contains("reward command '" + command + "'"));
    CHECK(empty_dir(scratch));  // the input and output files are removed on the error paths too
  };
  fails("exit 3", "failed (exit status 3)");
  fails("/nonexistent/reward", "failed (not found (exit 127))");
  fails(noexec, "failed (not executable (exit 126))");
  fails("kill -SEGV $$", "failed (exit status 139 (128 + SIGSEGV: a command the shell ran was killed by SIGSEGV))");
  fails("printf '1\\n0,9\\n'", "line 2 of its output, '0,9', is not one finite number");
  fails("printf '1\\n\\n90%%\\n'", "line 3 of its output, '90%', is not one finite number");  // blank lines count
  fails("echo 1", "wrote 1 rewards for 2 completions");
  fails("sleep 60", "did not finish within 0.2 s (--reward-timeout): it was killed", 0.2);
  // Control bytes in the quoted command and output are written as escapes (a NUL cut the message
  // where it stood: "line 1 of its output, '1" and nothing after).
  CHECK_THROWS_WITH(run("printf '1\\0\\n0\\n'"),
                    Catch::Contains("line 1 of its output, '1\\x00', is not one finite number (each line holds"));
  CHECK_THROWS_WITH(run("printf '\\033[2J1\\n0\\n'"), Catch::Contains("line 1 of its output, '\\x1b[2J1', is not"));
  CHECK_THROWS_WITH(run("echo 1\nexit 3"), Catch::Contains("reward command 'echo 1\\nexit 3' failed (exit status 3)"));
  CHECK(empty_dir(scratch));
  // A stop request: the command killed, no rewards, no error.
  int asked = 0;
  const auto stopped =
      command_rewards(RewardCommand{"sleep 60", 300, "rl.reward_timeout_s", scratch, [&] { return ++asked > 2; }},
                      two_requests());
  CHECK_FALSE(stopped.has_value());
  CHECK(empty_dir(scratch));
}

// The warning of a minibatch whose advantages are all 0 says why: equal rewards, or rewards that
// differ by less than a float advantage holds (1e-300 beside 0; tests/unit/data/test_rollouts.cpp).
TEST_CASE("rewards: the reason every advantage is 0 is the one that holds", "[train][rl]") {
  CHECK_THAT(odc::train::zero_advantages_reason(false),
             Catch::StartsWith("every advantage is 0 (the rewards of each group are equal): the policy-gradient term"));
  CHECK_THAT(odc::train::zero_advantages_reason(true),
             Catch::StartsWith("every advantage is 0 (the rewards of some groups differ, but by less than a float "
                               "advantage holds after rl.scale_rewards (each reward's scaled difference from its group's mean "
                               "rounds to 0)"));
}
