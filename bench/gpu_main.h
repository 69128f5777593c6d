#pragma once
// The frame of a GPU benchmark's main (gpu_ceilings, gpu_nccl): a UsageError from parsing prints
// the message and the usage and exits 2; without a visible CUDA device the program prints the
// SKIP line and exits 77 (what ctest and the GPU check's dry run count as skipped); any other
// error is printed and exits 1.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "bench_args.h"
#include "odc/core/error.h"
#include "odc/kernels/cuda_cast.h"

namespace odc::bench {

struct UsageError : odc::Error {
  using odc::Error::Error;
};

// The command line of a GPU benchmark: --help / -h prints `usage` and exits 0; every other argument
// is a flag followed by a non-negative integer, handed to on_flag(flag, value), which returns false
// for a flag it does not know. Mistakes are UsageErrors naming the flag.
template <typename OnFlag>
void parse_int_flags(int argc, char** argv, const char* usage, OnFlag&& on_flag) {
  walk_flags(
      argc, argv, usage,
      [&on_flag](const std::string& flag, const std::string& text) {
        std::int64_t value = 0;
        try {
          value = parse_int(flag, text);
        } catch (const odc::Error& e) {
          throw UsageError(e.what());
        }
        return on_flag(flag, value);
      },
      [](FlagMistake mistake, const std::string& flag) {
        if (mistake == FlagMistake::missing_value) throw UsageError(flag + " needs a value");
        throw UsageError("unknown argument '" + flag + "'");
      });
}

// parse() returns the options (throwing UsageError on a bad command line); run(options) measures.
template <typename Parse, typename Run>
int gpu_bench_main(const char* name, const char* usage, Parse&& parse, Run&& run) {
  decltype(parse()) options;
  try {
    options = parse();
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s\n%s", name, e.what(), usage);
    return 2;
  }
  try {
    std::string why;
    if (kernels::cuda::device_count(&why) == 0) {
      std::fprintf(stderr, "SKIP: no CUDA device visible (%s)\n", why.empty() ? "none" : why.c_str());
      return 77;
    }
    run(options);
    std::fflush(stdout);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", name, e.what());
    return 1;
  }
  return 0;
}

}  // namespace odc::bench
