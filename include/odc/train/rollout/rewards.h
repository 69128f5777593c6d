#pragma once
// Built-in verifiers of RL rollouts: a completion's text against the prompt's reference answer,
// reward 1 when it matches and 0 otherwise; or an external command's rewards.
//   exact   the completion, cut at the first end-of-turn marker (<|im_end|>, <|eot_id|>, </s>,
//           <|endoftext|>) and stripped of surrounding whitespace, equals the answer stripped;
//   number  the last number in the completion (an optional sign, digits, an optional fraction;
//           commas between digit groups ignored) equals the answer's number (compared as values:
//           "3.50" matches "3.5"); no number in the completion scores 0.
#include <filesystem>
#include <functional>
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

// An external reward command (a shell command line) and how it runs.
struct RewardCommand {
  std::string command;
  double timeout_s = 300.0;              // <= 0: no limit
  std::string timeout_origin = "rl.reward_timeout_s";  // how the limit is set, for messages
  std::filesystem::path scratch;         // where its input and output files go (removed after)
  std::function<bool()> stop_requested;  // asked while it runs (may be empty): true stops it
};

// Rewards from `command`: `requests` ({"prompt", "completion", "answer"} objects) as JSONL on its
// stdin, one reward per line on its stdout (shell_command.h: a process group of its own, killed
// with everything it started on a timeout or a stop). std::nullopt when `stop_requested` stopped
// it. odc::Error naming the command when it fails (its status in words), runs past its timeout,
// writes a line that is not one finite number, or the wrong count.
std::optional<std::vector<double>> command_rewards(const RewardCommand& command,
                                                   const std::vector<nlohmann::json>& requests);

// A reward command's output line as a number: the whole line one finite decimal number (an
// optional sign, digits, fraction, exponent; whitespace around it allowed), else std::nullopt:
// "0,9", "90%", "1.0 extra", "0x10", "nan" and "1e999" are no rewards.
std::optional<double> parse_reward(std::string_view line);

}  // namespace odc::train
