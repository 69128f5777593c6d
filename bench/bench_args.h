#pragma once
// Command-line values of the C++ benchmarks (one parser, one message for a bad value).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <sstream>
#include <string>
#include <vector>

#include "odc/core/error.h"

namespace odc::bench {

// A non-negative integer given to `flag`; odc::Error naming the flag and the text otherwise.
inline std::int64_t parse_int(const std::string& flag, const std::string& text) {
  std::size_t used = 0;
  long long value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || value < 0) odc::fail("{} expects a non-negative integer, got '{}'", flag, text);
  return value;
}

// A comma-separated list of non-negative integers given to `flag` ("64,128,512").
inline std::vector<std::int64_t> parse_int_list(const std::string& flag, const std::string& text) {
  std::vector<std::int64_t> out;
  std::stringstream list(text);
  for (std::string item; std::getline(list, item, ',');) out.push_back(parse_int(flag, item));
  return out;
}

enum class FlagMistake { missing_value, unknown };

// The walk every benchmark's command line takes: --help / -h prints `usage` and exits 0; every
// other flag takes the next argument as its value and goes to on_flag(flag, value), which returns
// false for a flag it does not know. A missing value or an unknown flag goes to
// on_mistake(mistake, flag), which throws.
template <typename OnFlag, typename OnMistake>
void walk_flags(int argc, char** argv, const char* usage, OnFlag&& on_flag, OnMistake&& on_mistake) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(usage, stdout);
      std::exit(0);
    }
    if (i + 1 >= argc) on_mistake(FlagMistake::missing_value, flag);
    const std::string value = argv[++i];
    if (!on_flag(flag, value)) on_mistake(FlagMistake::unknown, flag);
  }
}

// walk_flags whose mistakes are odc::Errors carrying the usage.
template <typename OnFlag>
void for_each_flag(int argc, char** argv, const char* usage, OnFlag&& on_flag) {
  walk_flags(argc, argv, usage, on_flag, [usage](FlagMistake mistake, const std::string& flag) {
    if (mistake == FlagMistake::missing_value) odc::fail("{} needs a value\n{}", flag, usage);
    odc::fail("unknown option '{}'\n{}", flag, usage);
  });
}

}  // namespace odc::bench
