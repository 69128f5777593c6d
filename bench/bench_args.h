#pragma once
// Command-line values of the C++ benchmarks (one parser, one message for a bad value).
#include <cstdint>
#include <exception>
#include <string>

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

}  // namespace odc::bench
