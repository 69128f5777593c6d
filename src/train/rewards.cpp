#include "odc/train/rewards.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>

#include "odc/core/error.h"

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

}  // namespace odc::train
