#pragma once
// The command line of every odc tool: declared options taken as "--flag value" or "--flag=value",
// flags, repeatable options (--set key=value), positional arguments, subcommands, typed lookups
// whose mistakes are usage errors, unknown options reported with the nearest declared one, options
// that only apply next to another one refused without it, and --help / -h. tool_main.h turns the
// outcomes into the tools' common exit codes.
#include <concepts>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "odc/core/config.h"

namespace odc::cli {

// A command-line mistake: the tool prints "COMMAND: message", a blank line and the command's
// usage on stderr, and exits 2.
class UsageError : public std::runtime_error {
 public:
  UsageError(std::string command, const std::string& message, std::string usage);
  const std::string& command() const { return command_; }  // "odc-data convert"
  const std::string& usage() const { return usage_; }

 private:
  std::string command_;
  std::string usage_;
};

// --help or -h: the usage on stdout and exit 0. Thrown where the flag is parsed, so every tool
// and subcommand answers it the same way, before any other work.
class HelpRequested : public std::exception {
 public:
  explicit HelpRequested(std::string usage) : usage_(std::move(usage)) {}
  const std::string& usage() const { return usage_; }
  const char* what() const noexcept override { return "--help"; }

 private:
  std::string usage_;
};

enum class Takes : std::uint8_t {
  nothing,  // a flag: --json
  value,    // --model DIR (given twice: the last one counts)
  values,   // repeatable: --set k=v --set k2=v2
};

struct Option {
  std::string name;  // "--model"
  Takes takes = Takes::value;
  // The option this one only applies with ("--plan-ranks" needs "--plan-memory"): given without
  // it, it would be ignored, so the command line is refused naming both.
  std::string needs = {};
};

// What one command accepts.
struct Command {
  std::string name;   // as messages name it: "odc-eval", "odc-data convert"
  std::string usage;  // the --help text, also shown after a usage error
  std::vector<Option> options;
  std::string positional = {};  // what a positional argument is, for messages ("config file"); empty: none
  std::size_t max_positionals = 0;
};

// A command line parsed against its Command. Lookups of undeclared options are bugs (ODC_CHECK).
class Arguments {
 public:
  // `args` without the program (and subcommand) name. Throws UsageError or HelpRequested.
  Arguments(Command command, const std::vector<std::string>& args);

  const std::string& name() const { return command_.name; }
  bool flag(std::string_view name) const;
  std::optional<std::string> value(std::string_view name) const;
  std::string value_or(std::string_view name, const std::string& fallback) const;
  // The value, or a usage error "NAME PLACEHOLDER is required" (--model DIR is required).
  std::string required(std::string_view name, std::string_view placeholder) const;
  // Integer lookups read into T, by default the fallback's type: text that is no integer, a value T
  // cannot hold (never truncated: "--plan-ranks must be <= 2147483647, got 4294967297") and a value
  // outside `range` are usage errors naming the option.
  template <std::integral T>
  T integer(std::string_view name, T fallback, const Range& range = {}) const {
    return optional_integer<T>(name, range).value_or(fallback);
  }
  template <std::integral T = std::int64_t>
  std::optional<T> optional_integer(std::string_view name, const Range& range = {}) const {
    const auto text = value(name);
    if (!text) return std::nullopt;
    return to_integer<T>(name, *text, range);
  }
  template <std::integral T = std::int64_t>
  T required_integer(std::string_view name, std::string_view placeholder, const Range& range = {}) const {
    return to_integer<T>(name, required(name, placeholder), range);
  }
  double number(std::string_view name, double fallback, const Range& range = {}) const;
  // One of `choices` (the nearest one suggested for a typo).
  std::string choice(std::string_view name, const std::vector<std::string>& choices, const std::string& fallback) const;
  // A comma-separated value, split ("a,b" -> {"a", "b"}).
  std::vector<std::string> list(std::string_view name, const std::vector<std::string>& fallback) const;
  template <std::integral T = std::int64_t>
  std::vector<T> integer_list(std::string_view name, const std::vector<T>& fallback, const Range& range = {}) const {
    const auto text = value(name);
    if (!text) return fallback;
    std::vector<T> out;
    for (const auto& part : split_list(*text)) out.push_back(to_integer<T>(name, part, range));
    return out;
  }
  const std::vector<std::string>& values(std::string_view name) const;  // a Takes::values option
  // The --set assignments, each checked to be key=value (odc::split_assignment).
  std::vector<std::string> assignments() const;
  const std::vector<std::string>& positionals() const { return positionals_; }
  std::string positional(std::size_t index) const;  // empty when not given
  // Positional argument `index` as an integer (fallback when not given); bad text or a value
  // outside `range` is a usage error naming the positional ("iteration count expects ...").
  template <std::integral T>
  T positional_integer(std::size_t index, T fallback, const Range& range = {}) const {
    return index < positionals_.size() ? to_integer<T>(command_.positional, positionals_[index], range) : fallback;
  }

  // A usage error of this command, for the checks only the tool can make.
  UsageError usage_error(const std::string& message) const;

 private:
  const Option& declared(std::string_view name, Takes takes) const;
  static std::vector<std::string> split_list(const std::string& text);  // "a,b" -> {"a", "b"}
  template <std::integral T>
  T to_integer(std::string_view name, const std::string& text, const Range& range) const {
    return static_cast<T>(integer_bits(name, text, range, std::numeric_limits<T>::min(), std::numeric_limits<T>::max()));
  }
  // `text` as an integer in [lowest, highest] (the limits of the type it is read into) and in
  // `range`, returned as its two's-complement bits (casting them to that type restores the value).
  std::uint64_t integer_bits(std::string_view name, const std::string& text, const Range& range, std::int64_t lowest,
                             std::uint64_t highest) const;
  void check_range(std::string_view name, double value, const std::string& text, const Range& range) const;

  Command command_;
  std::map<std::string, std::vector<std::string>, std::less<>> given_;
  std::vector<std::string> positionals_;
};

// A tool without subcommands: argv[1..].
Arguments parse(const Command& command, int argc, char** argv);

struct Subcommand {
  std::string name;  // "synth"
  Command command;   // its name is filled in as "TOOL NAME"
  std::function<int(const Arguments&)> run;
};

// argv[1] names the subcommand, the rest is its command line; runs it and returns its status.
// No subcommand or an unknown one is a usage error of the tool; --help, -h and "help" print `usage`.
int run_subcommand(const std::string& tool, const std::string& usage, const std::vector<Subcommand>& subcommands,
                   int argc, char** argv);

}  // namespace odc::cli
