#pragma once
// odc::Error: the one exception type for bad input and runtime failures. A message says what was
// expected, what was found, and where (file:line, config key, rank); tools print it and exit 1.
#include <stdexcept>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace odc {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// An error every rank of a job meets alike, because it comes from what they all read alike (the
// config, the data file): the tools print it once, not once per rank (tools/cli/tool_main.h says
// how a rank other than 0 waits for rank 0 to end the job).
class SameOnEveryRank : public Error {
 public:
  using Error::Error;
};

// Runs `read` (the reading of what every rank reads alike), its odc::Error as SameOnEveryRank.
template <typename Read>
auto same_on_every_rank(Read&& read) {
  try {
    return std::forward<Read>(read)();
  } catch (const SameOnEveryRank&) {
    throw;
  } catch (const Error& e) {
    throw SameOnEveryRank(e.what());
  }
}

// Throws odc::Error with a fmt-formatted message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

// Checks an internal invariant (not user input): a failure is a bug, reported with its location.
#define ODC_CHECK(cond, ...)                                                                     \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      throw ::odc::Error(::fmt::format("internal check failed at {}:{}: {} ({})", __FILE__,      \
                                       __LINE__, #cond, ::fmt::format(__VA_ARGS__)));            \
    }                                                                                            \
  } while (0)

}  // namespace odc
