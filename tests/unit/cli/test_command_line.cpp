// The tools' command-line toolkit (tools/cli): option syntax, typed lookups and their usage errors,
// positionals, subcommands, --help, and the exit codes and messages of run_tool.
#include "cli/command_line.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <unistd.h>

#include "cli/tool_main.h"
#include "odc/core/error.h"

namespace {

using Catch::Contains;
using odc::Range;
using odc::cli::Arguments;
using odc::cli::Command;
using odc::cli::HelpRequested;
using odc::cli::Takes;
using odc::cli::UsageError;

constexpr const char* kUsage = "usage: odc-test [CONFIG.yaml] [options]\n";

Command test_command() {
  return {"odc-test",
          kUsage,
          {{"--model"}, {"--threads"}, {"--lr"}, {"--dtype"}, {"--ops"}, {"--sizes"}, {"--set", Takes::values},
           {"--dump-config", Takes::nothing}},
          "config file",
          1};
}

Arguments parse(const std::vector<std::string>& args) { return Arguments(test_command(), args); }

// The message of the usage error `args` raise, which must name the command and carry its usage.
std::string usage_error(const std::vector<std::string>& args) {
  try {
    parse(args);
  } catch (const UsageError& e) {
    CHECK(e.command() == "odc-test");
    CHECK(e.usage() == kUsage);
    return e.what();
  }
  FAIL("no usage error");
  return {};
}

// Catches what a lookup on `args` throws as a usage error, for the typed lookups.
template <typename Lookup>
std::string lookup_error(const std::vector<std::string>& args, Lookup lookup) {
  const Arguments parsed = parse(args);
  try {
    lookup(parsed);
  } catch (const UsageError& e) {
    return e.what();
  }
  FAIL("no usage error");
  return {};
}

// Redirects stdout and stderr into files for one scope, so run_tool's messages can be read back.
class CapturedOutput {
 public:
  CapturedOutput() {
    std::fflush(stdout);
    std::fflush(stderr);
    saved_out_ = dup(STDOUT_FILENO);
    saved_err_ = dup(STDERR_FILENO);
    REQUIRE(std::freopen(out_path().c_str(), "w", stdout) != nullptr);
    REQUIRE(std::freopen(err_path().c_str(), "w", stderr) != nullptr);
  }
  ~CapturedOutput() { restore(); }
  CapturedOutput(const CapturedOutput&) = delete;
  CapturedOutput& operator=(const CapturedOutput&) = delete;

  // Ends the capture; returns {stdout, stderr}.
  std::pair<std::string, std::string> finish() {
    restore();
    return {read(out_path()), read(err_path())};
  }

 private:
  static std::string path(const char* name) {
    return (std::filesystem::temp_directory_path() / (std::string("odc_cli_") + std::to_string(getpid()) + name))
        .string();
  }
  static std::string out_path() { return path(".out"); }
  static std::string err_path() { return path(".err"); }
  static std::string read(const std::string& file) {
    std::ifstream in(file);
    std::string text{std::istreambuf_iterator<char>(in), {}};
    std::filesystem::remove(file);
    return text;
  }
  void restore() {
    if (saved_out_ < 0) return;
    std::fflush(stdout);
    std::fflush(stderr);
    dup2(saved_out_, STDOUT_FILENO);
    dup2(saved_err_, STDERR_FILENO);
    close(saved_out_);
    close(saved_err_);
    saved_out_ = saved_err_ = -1;
  }
  int saved_out_ = -1;
  int saved_err_ = -1;
};

}  // namespace

TEST_CASE("cli: options take --flag value and --flag=value, the last one counts", "[cli]") {
  const auto args = parse({"--model", "m1", "--threads=4", "--model=m2", "--lr", "-0.5", "--set", "a.b=1",
                           "--set=c.d=x=y", "run.yaml", "--dump-config"});
  CHECK(args.value("--model") == "m2");
  CHECK(args.integer("--threads", 1) == 4);
  CHECK(args.number("--lr", 0.0) == -0.5);  // a value may start with '-'
  CHECK(args.assignments() == std::vector<std::string>{"a.b=1", "c.d=x=y"});
  CHECK(args.flag("--dump-config"));
  CHECK(args.positional(0) == "run.yaml");
  CHECK(args.positionals().size() == 1);

  const auto bare = parse({});
  CHECK_FALSE(bare.value("--model").has_value());
  CHECK(bare.value_or("--model", "dir") == "dir");
  CHECK(bare.integer("--threads", 7) == 7);
  CHECK(bare.number("--lr", 0.25) == 0.25);
  CHECK_FALSE(bare.flag("--dump-config"));
  CHECK(bare.assignments().empty());
  CHECK(bare.positional(0).empty());
  CHECK(bare.list("--ops", {"gather"}) == std::vector<std::string>{"gather"});
  CHECK(bare.integer_list("--sizes", {1, 16}) == std::vector<std::int64_t>{1, 16});
}

TEST_CASE("cli: command-line mistakes are usage errors naming the culprit", "[cli]") {
  CHECK(usage_error({"--dump_config"}) == "unknown option '--dump_config'; did you mean '--dump-config'?");
  CHECK(usage_error({"--verbose"}) == "unknown option '--verbose'");
  CHECK(usage_error({"-x"}) == "unknown option '-x'");
  CHECK(usage_error({"--hlep"}) == "unknown option '--hlep'; did you mean '--help'?");
  CHECK(usage_error({"run.yaml", "--set"}) == "--set needs a value");
  CHECK(usage_error({"--dump-config=yes"}) == "--dump-config takes no value, got '--dump-config=yes'");
  CHECK(usage_error({"a.yaml", "b.yaml"}) == "only one config file may be given, got 'a.yaml' and 'b.yaml'");
  CHECK(usage_error({""}) == "empty argument where a config file was expected");
  CHECK(Arguments(Command{"odc-none", kUsage, {}}, {}).positionals().empty());
  CHECK_THROWS_WITH(Arguments(Command{"odc-none", kUsage, {}}, {"x"}), "unexpected argument 'x'");
}

TEST_CASE("cli: --set takes key=value, checked where it is typed", "[cli]") {
  CHECK(lookup_error({"--set", "train.lr"}, [](const Arguments& a) { a.assignments(); }) ==
        "--set expects key=value (e.g. --set train.lr=3e-4), got 'train.lr'");
  CHECK(lookup_error({"--set", "--dump-config"}, [](const Arguments& a) { a.assignments(); }) ==
        "--set expects key=value (e.g. --set train.lr=3e-4), got '--dump-config'");
  CHECK(lookup_error({"--set="}, [](const Arguments& a) { a.assignments(); }) ==
        "--set expects key=value (e.g. --set train.lr=3e-4), got ''");
}

TEST_CASE("cli: typed lookups turn bad text and values out of range into usage errors", "[cli]") {
  CHECK(lookup_error({"--threads", "many"}, [](const Arguments& a) { a.integer("--threads", 1); }) ==
        "--threads expects an integer, got 'many'");
  CHECK(lookup_error({"--threads", "1.5"}, [](const Arguments& a) { a.integer("--threads", 1); }) ==
        "--threads expects an integer, got '1.5'");
  CHECK(lookup_error({"--threads", "0"}, [](const Arguments& a) { a.integer("--threads", 1, Range::at_least(1)); }) ==
        "--threads must be >= 1, got 0");
  CHECK(parse({"--threads", "1"}).integer("--threads", 9, Range::at_least(1)) == 1);
  CHECK(lookup_error({"--lr", "fast"}, [](const Arguments& a) { a.number("--lr", 0.1); }) ==
        "--lr expects a number, got 'fast'");
  CHECK(lookup_error({"--lr", "inf"}, [](const Arguments& a) { a.number("--lr", 0.1); }) ==
        "--lr expects a number, got 'inf'");
  CHECK(lookup_error({"--lr", "1"}, [](const Arguments& a) { a.number("--lr", 0.1, Range::at_least(0).and_below(1)); }) ==
        "--lr must be in [0, 1), got 1");
  CHECK(parse({"--lr=0.999"}).number("--lr", 0.1, Range::at_least(0).and_below(1)) == 0.999);

  const std::vector<std::string> dtypes{"bf16", "f16", "f32"};
  CHECK(parse({"--dtype", "f16"}).choice("--dtype", dtypes, "bf16") == "f16");
  CHECK(parse({}).choice("--dtype", dtypes, "bf16") == "bf16");
  CHECK(lookup_error({"--dtype", "f61"}, [&](const Arguments& a) { a.choice("--dtype", dtypes, "bf16"); }) ==
        "--dtype expects one of bf16, f16, f32, got 'f61'; did you mean 'f16'?");

  CHECK(parse({"--ops=gather,,scatter"}).list("--ops", {}) == std::vector<std::string>{"gather", "", "scatter"});
  CHECK(parse({"--sizes", "1,16,64"}).integer_list("--sizes", {}, Range::at_least(1)) ==
        std::vector<std::int64_t>{1, 16, 64});
  CHECK(lookup_error({"--sizes", "1,0"}, [](const Arguments& a) { a.integer_list("--sizes", {}, Range::at_least(1)); }) ==
        "--sizes must be >= 1, got 0");

  CHECK(parse({"--model", "m"}).required("--model", "DIR") == "m");
  CHECK(lookup_error({}, [](const Arguments& a) { a.required("--model", "DIR"); }) == "--model DIR is required");
  CHECK(lookup_error({"--model="}, [](const Arguments& a) { a.required("--model", "DIR"); }) ==
        "--model DIR is required");
  CHECK(parse({"--threads", "3"}).required_integer("--threads", "N", Range::at_least(1)) == 3);
  CHECK(lookup_error({}, [](const Arguments& a) { a.required_integer("--threads", "N"); }) ==
        "--threads N is required");
  CHECK_FALSE(parse({}).optional_integer("--threads").has_value());
  // A positional argument as an integer: the positional's name stands for the option's.
  CHECK(parse({"12"}).positional_integer(0, 5, Range::at_least(1)) == 12);
  CHECK(parse({}).positional_integer(0, 5, Range::at_least(1)) == 5);
  CHECK(lookup_error({"x12"}, [](const Arguments& a) { a.positional_integer(0, 5); }) ==
        "config file expects an integer, got 'x12'");
  CHECK(lookup_error({"0"}, [](const Arguments& a) { a.positional_integer(0, 5, Range::at_least(1)); }) ==
        "config file must be >= 1, got 0");

  // Looking up an option the command does not declare is the tool's bug, not the user's.
  CHECK_THROWS_WITH(parse({}).value("--undeclared"), Contains("internal check failed") && Contains("--undeclared"));
  CHECK_THROWS_WITH(parse({}).flag("--model"), Contains("internal check failed"));
}

TEST_CASE("cli: an integer is read into its type, a value beyond it a usage error, never truncated", "[cli]") {
  // 4294967297 = 2^32 + 1 read into an int was 1 (odc-train --plan-ranks planned for one rank).
  CHECK(lookup_error({"--threads", "4294967297"}, [](const Arguments& a) { a.integer("--threads", 1); }) ==
        "--threads must be <= 2147483647, got 4294967297");
  CHECK(lookup_error({"--threads", "4294967297"},
                     [](const Arguments& a) { a.integer("--threads", 1, Range::at_least(1)); }) ==
        "--threads must be <= 2147483647, got 4294967297");
  CHECK(lookup_error({"--threads", "-2147483649"}, [](const Arguments& a) { a.integer("--threads", 1); }) ==
        "--threads must be >= -2147483648, got -2147483649");
  CHECK(parse({"--threads", "2147483647"}).integer("--threads", 1) == 2147483647);
  CHECK(parse({"--threads", "-2147483648"}).integer("--threads", 1) == -2147483648);
  // The fallback's type decides; an explicit type overrides it.
  CHECK(parse({"--threads", "4294967297"}).integer("--threads", std::int64_t{1}) == 4294967297LL);
  CHECK(lookup_error({"--threads", "9223372036854775808"},
                     [](const Arguments& a) { a.integer("--threads", std::int64_t{1}); }) ==
        "--threads must be <= 9223372036854775807, got 9223372036854775808");
  CHECK(lookup_error({"--threads", "-9223372036854775809"},
                     [](const Arguments& a) { a.integer("--threads", std::int64_t{1}); }) ==
        "--threads must be >= -9223372036854775808, got -9223372036854775809");
  // A seed takes every 64-bit value, and no negative one.
  CHECK(parse({"--threads", "18446744073709551615"}).integer<std::uint64_t>("--threads", 0) ==
        18446744073709551615ULL);
  CHECK(lookup_error({"--threads", "18446744073709551616"},
                     [](const Arguments& a) { a.integer<std::uint64_t>("--threads", 0); }) ==
        "--threads must be <= 18446744073709551615, got 18446744073709551616");
  CHECK(lookup_error({"--threads", "-1"}, [](const Arguments& a) { a.integer<std::uint64_t>("--threads", 0); }) ==
        "--threads must be >= 0, got -1");
  CHECK(lookup_error({"--threads", "-"}, [](const Arguments& a) { a.integer("--threads", 1); }) ==
        "--threads expects an integer, got '-'");
  CHECK(lookup_error({"--threads", "99999999999999999999x"}, [](const Arguments& a) { a.integer("--threads", 1); }) ==
        "--threads expects an integer, got '99999999999999999999x'");
  CHECK(lookup_error({"--threads", "300"}, [](const Arguments& a) { a.integer<std::uint8_t>("--threads", 0); }) ==
        "--threads must be <= 255, got 300");
  CHECK(lookup_error({"--threads", "70000"}, [](const Arguments& a) { a.optional_integer<std::int16_t>("--threads"); }) ==
        "--threads must be <= 32767, got 70000");
  CHECK(lookup_error({"--threads", "4294967297"},
                     [](const Arguments& a) { a.required_integer<int>("--threads", "N", Range::at_least(1)); }) ==
        "--threads must be <= 2147483647, got 4294967297");
  CHECK(lookup_error({"--sizes", "1,4294967296"},
                     [](const Arguments& a) { a.integer_list<int>("--sizes", {}, Range::at_least(1)); }) ==
        "--sizes must be <= 2147483647, got 4294967296");
  CHECK(parse({"--sizes", "1,4294967296"}).integer_list("--sizes", {}) == std::vector<std::int64_t>{1, 4294967296LL});
  CHECK(lookup_error({"4294967297"}, [](const Arguments& a) { a.positional_integer(0, 5); }) ==
        "config file must be <= 2147483647, got 4294967297");
}

TEST_CASE("cli: an option that applies only with another is refused without it", "[cli]") {
  const Command command{"odc-plan",
                        kUsage,
                        {{"--plan-memory", Takes::nothing},
                         {"--plan-ranks", Takes::value, "--plan-memory"},
                         {"--chat", Takes::nothing},
                         {"--template", Takes::values, "--chat"}}};
  CHECK_THROWS_WITH(Arguments(command, {"--plan-ranks", "4"}),
                    "--plan-ranks applies only with --plan-memory, which is not given (alone it would be ignored)");
  CHECK_THROWS_WITH(Arguments(command, {"--template=a", "--plan-memory"}),
                    "--template applies only with --chat, which is not given (alone it would be ignored)");
  // Either order; the option it needs may come later.
  CHECK(Arguments(command, {"--plan-ranks", "4", "--plan-memory"}).integer("--plan-ranks", 1) == 4);
  CHECK(Arguments(command, {"--plan-memory"}).integer("--plan-ranks", 3) == 3);
  CHECK(Arguments(command, {"--chat", "--template", "x"}).values("--template") == std::vector<std::string>{"x"});
  // --help still wins over the missing option: it is answered where it is read.
  CHECK_THROWS_AS(Arguments(command, {"--plan-ranks", "4", "--help"}), HelpRequested);
}

TEST_CASE("cli: --help and -h end parsing with the command's usage", "[cli]") {
  for (const std::string help : {"--help", "-h"}) {
    try {
      parse({"run.yaml", help, "--bogus"});
      FAIL("no help");
    } catch (const HelpRequested& requested) {
      CHECK(requested.usage() == kUsage);
    }
  }
  // Arguments are read in order: a mistake before the flag is reported as one.
  CHECK(usage_error({"--bogus", "--help"}) == "unknown option '--bogus'");
}

TEST_CASE("cli: subcommands run by name, each with its own options and usage", "[cli]") {
  std::vector<std::string> seen;
  const std::vector<odc::cli::Subcommand> subcommands = {
      {"synth", Command{"", "usage: tool synth\n", {{"--out"}}},
       [&](const Arguments& a) {
         seen.push_back(a.name() + " " + a.required("--out", "PATH"));
         return 0;
       }},
      {"convert", Command{"", "usage: tool convert\n", {{"--in"}}}, [&](const Arguments&) { return 3; }},
  };
  const auto run = [&](std::vector<std::string> words) {
    words.insert(words.begin(), "tool");
    std::vector<char*> argv;
    for (auto& word : words) argv.push_back(word.data());
    return odc::cli::run_subcommand("tool", "usage: tool <command>\n", subcommands, static_cast<int>(argv.size()),
                                    argv.data());
  };
  CHECK(run({"synth", "--out=x"}) == 0);
  CHECK(seen == std::vector<std::string>{"tool synth x"});
  CHECK(run({"convert"}) == 3);
  CHECK_THROWS_WITH(run({"synth", "--in", "x"}), "unknown option '--in'");
  try {
    run({"convert", "--out", "x"});
  } catch (const UsageError& e) {
    CHECK(e.command() == "tool convert");
    CHECK(e.usage() == "usage: tool convert\n");
  }
  CHECK_THROWS_WITH(run({"synht"}), "unknown command 'synht'; did you mean 'synth'?");
  CHECK_THROWS_WITH(run({}), "expected a command: synth, convert");
  for (const std::string help : {"--help", "-h", "help"}) {
    try {
      run({help});
      FAIL("no help");
    } catch (const HelpRequested& requested) {
      CHECK(requested.usage() == "usage: tool <command>\n");
    }
  }
  try {
    run({"synth", "-h"});
    FAIL("no help");
  } catch (const HelpRequested& requested) {
    CHECK(requested.usage() == "usage: tool synth\n");
  }
}

TEST_CASE("cli: run_tool exits 0, 1 or 2 with the tool's messages", "[cli]") {
  struct Case {
    std::function<int()> body;
    int code;
    std::string out;
    std::string err;
  };
  const std::vector<Case> cases = {
      {[] { return 0; }, 0, "", ""},
      {[]() -> int { throw HelpRequested(kUsage); }, 0, kUsage, ""},
      {[]() -> int { parse({"--bogus"}); return 0; }, 2, "", std::string("odc-test: unknown option '--bogus'\n\n") + kUsage},
      {[]() -> int { odc::fail("bad data in {}:{}", "x.jsonl", 3); }, 1, "", "odc-tool: error: bad data in x.jsonl:3\n"},
      {[]() -> int { throw std::runtime_error("boom"); }, 1, "", "odc-tool: unexpected error: boom\n"},
  };
  for (const auto& c : cases) {
    CapturedOutput capture;
    const int code = odc::cli::run_tool("odc-tool", c.body);
    const auto [out, err] = capture.finish();
    CHECK(code == c.code);
    CHECK(out == c.out);
    CHECK(err == c.err);
  }
  CHECK(odc::cli::kExitSuccess == 0);
  CHECK(odc::cli::kExitFailure == 1);
  CHECK(odc::cli::kExitUsage == 2);
}
