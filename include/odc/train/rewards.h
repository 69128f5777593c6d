#pragma once
// Built-in verifiers of RL rollouts: a completion's text against the prompt's reference answer,
// reward 1 when it matches and 0 otherwise; or an external command's rewards.
//   exact   the completion, cut at the first end-of-turn marker (<|im_end|>, <|eot_id|>, </s>,
//           <|endoftext|>) and stripped of surrounding whitespace, equals the answer stripped;
//   number  the last number in the completion (an optional sign, digits, an optional fraction;
//           commas between digit groups ignored) equals the answer's number (compared as values:
//           "3.50" matches "3.5"); no number in the completion scores 0.
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace odc::train {

enum class Verifier { exact, number };
Verifier parse_verifier(const std::string& name);  // odc::Error naming the choices

double exact_match_reward(std::string_view completion, std::string_view answer);
double number_match_reward(std::string_view completion, std::string_view answer);
double reward_of(Verifier verifier, std::string_view completion, std::string_view answer);

// The last number in `text`, if any (as number_match_reward reads it).
std::optional<double> last_number(std::string_view text);

// Rewards from an external command (a shell command line): `requests` ({"prompt", "completion",
// "answer"} objects) as JSONL on its stdin, one reward (a finite number) per line on its stdout.
// The files pass through `scratch` (a directory) and are removed after. odc::Error naming the
// command when it fails, writes something that is not a number, or the wrong count.
std::vector<double> command_rewards(const std::string& command, const std::vector<nlohmann::json>& requests,
                                    const std::filesystem::path& scratch);

}  // namespace odc::train
