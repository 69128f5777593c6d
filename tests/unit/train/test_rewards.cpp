// The built-in verifiers: exact match up to the end-of-turn marker and surrounding whitespace;
// number match on the last number (sign, fraction, digit-group commas; values compared).
#include <catch2/catch.hpp>

#include "odc/core/error.h"
#include "odc/train/rewards.h"

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
