// The vocabulary of declarations and assignments: value ranges and how they read, the check of a
// value against its declaration (config_values.h), the tunable() declaration helpers, the key=value
// split of --set, and the nearest-name hint of "did you mean".
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "odc/core/config.h"
#include "odc/core/error.h"
#include "odc/core/text.h"
#include "config_values.h"
#include "yaml_text.h"

namespace odc {
namespace {

// A suggestion further away than this is more likely noise than the intended name.
constexpr std::size_t kMaxSuggestionDistance = 2;

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> previous(b.size() + 1);
  std::vector<std::size_t> current(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) previous[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t substitution = previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, substitution});
    }
    std::swap(previous, current);
  }
  return previous[b.size()];
}

}  // namespace

Range Range::at_least(double minimum) {
  Range range;
  range.lower_ = Bound{minimum, true};
  return range;
}

Range Range::above(double minimum) {
  Range range;
  range.lower_ = Bound{minimum, false};
  return range;
}

Range Range::at_most(double maximum) { return Range().and_at_most(maximum); }

Range Range::below(double maximum) { return Range().and_below(maximum); }

Range Range::and_at_most(double maximum) const {
  Range range = *this;
  range.upper_ = Bound{maximum, true};
  return range;
}

Range Range::and_below(double maximum) const {
  Range range = *this;
  range.upper_ = Bound{maximum, false};
  return range;
}

bool Range::contains(double value) const {
  if (lower_ && (lower_->inclusive ? value < lower_->value : value <= lower_->value)) return false;
  if (upper_ && (upper_->inclusive ? value > upper_->value : value >= upper_->value)) return false;
  return !std::isnan(value);
}

std::string Range::text() const {
  if (lower_ && upper_) {
    return fmt::format("in {}{}, {}{}", lower_->inclusive ? '[' : '(', lower_->value, upper_->value,
                       upper_->inclusive ? ']' : ')');
  }
  if (lower_) return fmt::format("{} {}", lower_->inclusive ? ">=" : ">", lower_->value);
  if (upper_) return fmt::format("{} {}", upper_->inclusive ? "<=" : "<", upper_->value);
  return {};
}

TunableSpec tunable(std::string path, ValueKind kind, std::string default_value, std::string doc,
                    std::vector<std::string> choices, bool required) {
  return {std::move(path), kind, std::move(default_value), std::move(doc), std::move(choices), required, Range()};
}

TunableSpec tunable(std::string path, ValueKind kind, std::string default_value, std::string doc, Range range) {
  return {std::move(path), kind, std::move(default_value), std::move(doc), {}, false, range};
}

TunableSpec tunable(std::string path, std::string default_value, std::string doc, Range range,
                    std::vector<std::string> words) {
  return {std::move(path), ValueKind::integer, std::move(default_value), std::move(doc), std::move(words), false, range};
}

std::pair<std::string, std::string> split_assignment(const std::string& assignment) {
  const std::size_t equals = assignment.find('=');
  std::string key = trim(std::string_view(assignment).substr(0, equals));
  if (equals == std::string::npos || key.empty()) {
    fail("--set expects key=value (e.g. --set train.lr=3e-4), got '{}'", assignment);
  }
  return {std::move(key), assignment.substr(equals + 1)};
}

// First candidate on ties, so the declaration order decides between equally near names.
std::string closest_name(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_distance = kMaxSuggestionDistance + 1;
  for (const auto& candidate : candidates) {
    const std::size_t distance = edit_distance(word, candidate);
    if (distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

namespace config_values {

using yaml_text::describe;
using yaml_text::parse_integer;
using yaml_text::parse_number;
using yaml_text::parse_boolean;

std::string did_you_mean(const std::string& suggestion) {
  return suggestion.empty() ? std::string() : fmt::format("; did you mean '{}'?", suggestion);
}

const char* kind_name(ValueKind kind) {
  switch (kind) {
    case ValueKind::integer: return "an integer";
    case ValueKind::number: return "a number";
    case ValueKind::boolean: return "true or false";
    case ValueKind::string: return "a string";
    case ValueKind::map: return "a mapping of keys";
  }
  return "a value";
}

void check_value(const TunableSpec& spec, const YAML::Node& node, const std::string& where) {
  const auto mismatch = [&] {
    fail("config key '{}' in {} expects {}, found {}", spec.path, where, kind_name(spec.kind),
         describe(node));
  };
  const auto check_range = [&](double value) {
    if (!spec.range.contains(value)) {
      fail("config key '{}' in {} must be {}, found {}", spec.path, where, spec.range.text(), node.Scalar());
    }
  };
  switch (spec.kind) {
    case ValueKind::integer: {
      if (node.IsScalar() && std::find(spec.choices.begin(), spec.choices.end(), node.Scalar()) != spec.choices.end()) {
        return;  // one of the words the key accepts besides numbers
      }
      const auto value = node.IsScalar() ? parse_integer(node.Scalar()) : std::nullopt;
      if (!value && node.IsScalar() && yaml_text::is_integer_text(node.Scalar())) {  // too large for 64 bits
        fail("config key '{}' in {} must be in [{}, {}] (a 64-bit integer), found {}", spec.path, where,
             std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max(), node.Scalar());
      }
      if (!value) {
        if (spec.choices.empty()) mismatch();
        fail("config key '{}' in {} expects an integer or {}, found {}", spec.path, where, fmt::join(spec.choices, ", "),
             describe(node));
      }
      check_range(static_cast<double>(value.value()));
      return;
    }
    case ValueKind::number: {
      const auto value = node.IsScalar() ? parse_number(node.Scalar()) : std::nullopt;
      if (!value) mismatch();
      check_range(value.value());
      return;
    }
    case ValueKind::boolean:
      if (!parse_boolean(node)) mismatch();
      return;
    case ValueKind::string:
      if (!node.IsScalar()) mismatch();
      if (!spec.choices.empty() && std::find(spec.choices.begin(), spec.choices.end(),
                                             node.Scalar()) == spec.choices.end()) {
        fail("config key '{}' in {} expects one of {}, found '{}'{}", spec.path, where, fmt::join(spec.choices, ", "),
             node.Scalar(), did_you_mean(closest_name(node.Scalar(), spec.choices)));
      }
      // Only a shell expands ~, and only at the start of a word: "~/data" in a file or after
      // --set key= would name a directory called "~" under the current one.
      if (node.Scalar().starts_with("~/")) {
        fail("config key '{}' in {} is '{}': '~' is not expanded here; write the path out ($HOME/... in a shell, or "
             "an absolute path)",
             spec.path, where, node.Scalar());
      }
      return;
    case ValueKind::map:
      if (!node.IsMap()) mismatch();
      return;
  }
}

}  // namespace config_values
}  // namespace odc
