#include "odc/train/rollout/rewards.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>
#include <unistd.h>

#include <fmt/format.h>

#include "odc/core/error.h"
#include "odc/core/shell_command.h"
#include "odc/core/text.h"
#include "odc/core/wait_status.h"

namespace odc::train {

namespace {

std::string_view strip(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string_view cut_at_end_of_turn(std::string_view s) {
  for (const std::string_view marker : {"<|im_end|>", "<|eot_id|>", "</s>", "<|endoftext|>"}) {
    const auto at = s.find(marker);
    if (at != std::string_view::npos) s = s.substr(0, at);
  }
  return s;
}

bool digit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }

}  // namespace

Verifier parse_verifier(const std::string& name) {
  if (name == "exact") return Verifier::exact;
  if (name == "number") return Verifier::number;
  fail("unknown verifier '{}' (choices: exact, number)", name);
}

std::optional<double> last_number(std::string_view text) {
  std::optional<double> last;
  std::size_t i = 0;
  while (i < text.size()) {
    if (!digit(text[i])) {
      ++i;
      continue;
    }
    const std::size_t start = i;
    std::string digits;
    while (i < text.size() && (digit(text[i]) || (text[i] == ',' && i + 1 < text.size() && digit(text[i + 1])))) {
      if (text[i] != ',') digits += text[i];
      ++i;
    }
    if (i + 1 < text.size() && text[i] == '.' && digit(text[i + 1])) {
      digits += '.';
      ++i;
      while (i < text.size() && digit(text[i])) digits += text[i++];
    }
    double value = std::stod(digits);
    if (start > 0 && text[start - 1] == '-') value = -value;
    last = value;
  }
  return last;
}

double exact_match_reward(std::string_view completion, std::string_view answer) {
  return strip(cut_at_end_of_turn(completion)) == strip(answer) ? 1.0 : 0.0;
}

double number_match_reward(std::string_view completion, std::string_view answer) {
  const auto want = last_number(answer);
  if (!want) fail("the answer '{}' holds no number for the number verifier", answer);
  const auto got = last_number(cut_at_end_of_turn(completion));
  return got && std::fabs(*got - *want) <= 1e-9 * std::max(1.0, std::fabs(*want)) ? 1.0 : 0.0;
}

double reward_of(Verifier verifier, std::string_view completion, std::string_view answer) {
  return verifier == Verifier::exact ? exact_match_reward(completion, answer) : number_match_reward(completion, answer);
}

std::optional<double> parse_reward(std::string_view line) {
  std::string_view text = strip(line);
  // from_chars takes a '-' only; a '+' before a digit or the point is a sign too ("+-1" is not).
  if (text.size() > 1 && text.front() == '+' && (digit(text[1]) || text[1] == '.')) text.remove_prefix(1);
  double value = 0.0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value, std::chars_format::general);
  if (error != std::errc() || end != text.data() + text.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

std::optional<std::vector<double>> command_rewards(const RewardCommand& reward,
                                                   const std::vector<nlohmann::json>& requests) {
  const std::string shown = escape_control(reward.command);  // the command as the errors quote it
  const std::string stem = fmt::format("odc-rewards-{}", ::getpid());
  const auto in_path = reward.scratch / (stem + ".requests.jsonl");
  const auto out_path = reward.scratch / (stem + ".rewards.txt");
  struct Cleanup {  // on every way out, the error paths too
    std::filesystem::path a, b;
    ~Cleanup() {
      std::error_code ignored;
      std::filesystem::remove(a, ignored);
      std::filesystem::remove(b, ignored);
    }
  } cleanup{in_path, out_path};
  {
    std::ofstream in(in_path);
    if (!in) fail("reward command '{}': cannot write its input file {}", shown, in_path.string());
    for (const auto& r : requests) in << r.dump() << "\n";
    if (!in.flush()) fail("reward command '{}': cannot write its input file {}", shown, in_path.string());
  }
  const ShellCommandResult run =
      run_shell_command(reward.command, in_path.string(), out_path.string(), reward.timeout_s, reward.stop_requested);
  if (run.ended == ShellCommandResult::Ended::stopped) return std::nullopt;
  if (run.ended == ShellCommandResult::Ended::timed_out) {
    fail("reward command '{}' did not finish within {} s ({}): it was killed with every process it started; "
         "raise the limit or make the command faster", shown, reward.timeout_s, reward.timeout_origin);
  }
  if (run.wait_status != 0) fail("reward command '{}' failed ({})", shown, describe_wait_status(run.wait_status));
  std::ifstream out(out_path);
  std::vector<double> rewards;
  std::string line;
  for (std::int64_t number = 1; std::getline(out, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto value = parse_reward(line);
    if (!value) {
      fail("reward command '{}': line {} of its output, '{}', is not one finite number (each line holds a reward "
           "such as 1, 0.5 or -2e-3, and nothing else)", shown, number, escape_control(line));
    }
    rewards.push_back(*value);
  }
  if (rewards.size() != requests.size()) {
    fail("reward command '{}' wrote {} rewards for {} completions", shown, rewards.size(), requests.size());
  }
  return rewards;
}

}  // namespace odc::train
