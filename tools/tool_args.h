#pragma once
// Command-line handling shared by the small tools (odc-eval, odc-generate): "--flag value" and
// "--flag=value" options, typed lookups, unknown flags reported, and one main wrapper that maps
// usage errors to exit 2 and bad input (odc::Error) to exit 1 with "TOOL: error: ...".
#include <charconv>
#include <cstdio>
#include <exception>
#include <functional>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "odc/core/error.h"

namespace odc::tools {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Args {
 public:
  Args(int argc, char** argv, std::string tool) : tool_(std::move(tool)) {
    for (int i = 1; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg == "-h") arg = "--help";
      if (arg.rfind("--", 0) != 0) throw UsageError(fmt::format("unexpected argument '{}'", arg));
      if (const auto eq = arg.find('='); eq != std::string::npos) {
        values_[arg.substr(0, eq)] = arg.substr(eq + 1);
      } else if (i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0) {
        values_[arg] = argv[++i];
      } else {
        values_[arg] = "";  // a bare flag
      }
    }
  }
  bool flag(const std::string& name) {
    used_.insert(name);
    return values_.contains(name);
  }
  std::string value(const std::string& name, const std::string& fallback = "") {
    used_.insert(name);
    const auto it = values_.find(name);
    return it == values_.end() ? fallback : it->second;
  }
  std::int64_t integer(const std::string& name, std::int64_t fallback) {
    const std::string text = value(name);
    if (text.empty()) return fallback;
    std::int64_t out = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    if (ec != std::errc() || end != text.data() + text.size()) {
      throw UsageError(fmt::format("{} expects an integer, got '{}'", name, text));
    }
    return out;
  }
  double number(const std::string& name, double fallback) {
    const std::string text = value(name);
    if (text.empty()) return fallback;
    try {
      std::size_t used = 0;
      const double out = std::stod(text, &used);
      if (used == text.size()) return out;
    } catch (const std::exception&) {
    }
    throw UsageError(fmt::format("{} expects a number, got '{}'", name, text));
  }
  // Every given flag must have been looked up: a typo is a usage error, not silently ignored.
  void finish() const {
    for (const auto& [name, value] : values_) {
      if (!used_.contains(name)) throw UsageError(fmt::format("unknown option '{}'", name));
    }
  }

 private:
  std::string tool_;
  std::map<std::string, std::string> values_;
  std::set<std::string> used_;
};

inline int run_tool(const char* tool, const char* usage, const std::function<int()>& body) {
  try {
    return body();
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s\n\n%s", tool, e.what(), usage);
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: error: %s\n", tool, e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: unexpected error: %s\n", tool, e.what());
  }
  return 1;
}

}  // namespace odc::tools
