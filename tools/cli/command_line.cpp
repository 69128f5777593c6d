#include "cli/command_line.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <utility>

#include <fmt/format.h>

#include "odc/core/error.h"

namespace odc::cli {
namespace {

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  const std::string nearest = closest_name(word, candidates);
  return nearest.empty() ? std::string() : fmt::format("; did you mean '{}'?", nearest);
}

}  // namespace

UsageError::UsageError(std::string command, const std::string& message, std::string usage)
    : std::runtime_error(message), command_(std::move(command)), usage_(std::move(usage)) {}

Arguments::Arguments(Command command, const std::vector<std::string>& args) : command_(std::move(command)) {
  std::vector<std::string> names{"--help"};
  for (const auto& option : command_.options) names.push_back(option.name);
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& argument = args[i];
    if (argument == "--help" || argument == "-h") throw HelpRequested(command_.usage);
    if (argument.size() > 1 && argument.front() == '-') {
      const std::size_t equals = argument.starts_with("--") ? argument.find('=') : std::string::npos;
      const std::string name = argument.substr(0, equals);
      const auto option = std::find_if(command_.options.begin(), command_.options.end(),
                                       [&](const Option& o) { return o.name == name; });
      if (option == command_.options.end()) {
        throw usage_error(fmt::format("unknown option '{}'{}", name, did_you_mean(name, names)));
      }
      auto& given = given_[name];
      if (option->takes == Takes::nothing) {
        if (equals != std::string::npos) throw usage_error(fmt::format("{} takes no value, got '{}'", name, argument));
        continue;
      }
      if (equals != std::string::npos) {
        given.push_back(argument.substr(equals + 1));
      } else if (i + 1 < args.size()) {
        given.push_back(args[++i]);  // whatever it is: a value may start with '-'
      } else {
        throw usage_error(fmt::format("{} needs a value", name));
      }
      continue;
    }
    if (command_.max_positionals == 0) throw usage_error(fmt::format("unexpected argument '{}'", argument));
    if (argument.empty()) throw usage_error(fmt::format("empty argument where a {} was expected", command_.positional));
    if (positionals_.size() == command_.max_positionals) {
      throw usage_error(command_.max_positionals == 1
                            ? fmt::format("only one {} may be given, got '{}' and '{}'", command_.positional,
                                          positionals_.front(), argument)
                            : fmt::format("at most {} arguments ({}) may be given, got '{}' too",
                                          command_.max_positionals, command_.positional, argument));
    }
    positionals_.push_back(argument);
  }
  // An option that only applies with another one would be ignored without it.
  for (const auto& option : command_.options) {
    if (!option.needs.empty() && given_.contains(option.name) && !given_.contains(option.needs)) {
      throw usage_error(fmt::format("{} applies only with {}, which is not given (alone it would be ignored)",
                                    option.name, option.needs));
    }
  }
}

std::vector<std::string> Arguments::split_list(const std::string& text) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = text.find(',', start);
    parts.push_back(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) return parts;
    start = comma + 1;
  }
}

const Option& Arguments::declared(std::string_view name, Takes takes) const {
  const auto option = std::find_if(command_.options.begin(), command_.options.end(),
                                   [&](const Option& o) { return o.name == name; });
  ODC_CHECK(option != command_.options.end(), "{} looks up option {}, which it does not declare", command_.name, name);
  ODC_CHECK(option->takes == takes || (takes == Takes::value && option->takes == Takes::values),
            "{} looks up option {} as another kind than it declares", command_.name, name);
  return *option;
}

bool Arguments::flag(std::string_view name) const {
  declared(name, Takes::nothing);
  return given_.contains(name);
}

std::optional<std::string> Arguments::value(std::string_view name) const {
  declared(name, Takes::value);
  const auto it = given_.find(name);
  if (it == given_.end()) return std::nullopt;
  return it->second.back();
}

std::string Arguments::value_or(std::string_view name, const std::string& fallback) const {
  return value(name).value_or(fallback);
}

std::string Arguments::required(std::string_view name, std::string_view placeholder) const {
  auto given = value(name);
  if (!given || given->empty()) throw usage_error(fmt::format("{} {} is required", name, placeholder));
  return std::move(*given);
}

void Arguments::check_range(std::string_view name, double value, const std::string& text, const Range& range) const {
  if (!range.contains(value)) throw usage_error(fmt::format("{} must be {}, got {}", name, range.text(), text));
}

std::uint64_t Arguments::integer_bits(std::string_view name, const std::string& text, const Range& range,
                                      std::int64_t lowest, std::uint64_t highest) const {
  const char* const end = text.data() + text.size();
  // Parsed as the widest type of its sign, so that a value beyond the target type is reported as
  // out of range rather than as no integer at all.
  std::uint64_t bits = 0;
  double value = 0.0;
  std::from_chars_result parsed{};
  if (!text.empty() && text.front() == '-') {
    std::int64_t negative = 0;
    parsed = std::from_chars(text.data(), end, negative);
    const bool whole = parsed.ptr == end;
    if (whole && (parsed.ec == std::errc::result_out_of_range || (parsed.ec == std::errc() && negative < lowest))) {
      throw usage_error(fmt::format("{} must be >= {}, got {}", name, lowest, text));
    }
    bits = static_cast<std::uint64_t>(negative);
    value = static_cast<double>(negative);
  } else {
    parsed = std::from_chars(text.data(), end, bits);
    const bool whole = parsed.ptr == end;
    if (whole && (parsed.ec == std::errc::result_out_of_range || (parsed.ec == std::errc() && bits > highest))) {
      throw usage_error(fmt::format("{} must be <= {}, got {}", name, highest, text));
    }
    value = static_cast<double>(bits);
  }
  if (text.empty() || parsed.ec != std::errc() || parsed.ptr != end) {
    throw usage_error(fmt::format("{} expects an integer, got '{}'", name, text));
  }
  check_range(name, value, text, range);
  return bits;
}

double Arguments::number(std::string_view name, double fallback, const Range& range) const {
  const auto text = value(name);
  if (!text) return fallback;
  double out = 0.0;
  const auto [end, error] = std::from_chars(text->data(), text->data() + text->size(), out);
  if (text->empty() || error != std::errc() || end != text->data() + text->size() || !std::isfinite(out)) {
    throw usage_error(fmt::format("{} expects a number, got '{}'", name, *text));
  }
  check_range(name, out, *text, range);
  return out;
}

std::string Arguments::choice(std::string_view name, const std::vector<std::string>& choices,
                              const std::string& fallback) const {
  std::string given = value_or(name, fallback);
  if (std::find(choices.begin(), choices.end(), given) == choices.end()) {
    throw usage_error(fmt::format("{} expects one of {}, got '{}'{}", name, fmt::join(choices, ", "), given,
                                  did_you_mean(given, choices)));
  }
  return given;
}

std::vector<std::string> Arguments::list(std::string_view name, const std::vector<std::string>& fallback) const {
  const auto text = value(name);
  return text ? split_list(*text) : fallback;
}

const std::vector<std::string>& Arguments::values(std::string_view name) const {
  static const std::vector<std::string> none;
  declared(name, Takes::values);
  const auto it = given_.find(name);
  return it == given_.end() ? none : it->second;
}

std::vector<std::string> Arguments::assignments() const {
  const auto& given = values("--set");
  for (const auto& assignment : given) {
    try {
      split_assignment(assignment);
    } catch (const Error& e) {
      throw usage_error(e.what());
    }
  }
  return given;
}

std::string Arguments::positional(std::size_t index) const {
  return index < positionals_.size() ? positionals_[index] : std::string();
}

UsageError Arguments::usage_error(const std::string& message) const {
  return UsageError(command_.name, message, command_.usage);
}

Arguments parse(const Command& command, int argc, char** argv) {
  return Arguments(command, std::vector<std::string>(argv + 1, argv + argc));
}

int run_subcommand(const std::string& tool, const std::string& usage, const std::vector<Subcommand>& subcommands,
                   int argc, char** argv) {
  std::vector<std::string> names;
  for (const auto& subcommand : subcommands) names.push_back(subcommand.name);
  if (argc < 2) throw UsageError(tool, fmt::format("expected a command: {}", fmt::join(names, ", ")), usage);
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") throw HelpRequested(usage);
  const auto chosen = std::find_if(subcommands.begin(), subcommands.end(),
                                   [&](const Subcommand& subcommand) { return subcommand.name == name; });
  if (chosen == subcommands.end()) {
    throw UsageError(tool, fmt::format("unknown command '{}'{}", name, did_you_mean(name, names)), usage);
  }
  Command command = chosen->command;
  command.name = tool + " " + name;
  return chosen->run(Arguments(std::move(command), std::vector<std::string>(argv + 2, argv + argc)));
}

}  // namespace odc::cli
