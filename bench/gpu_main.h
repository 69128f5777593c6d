#pragma once
// The frame of a GPU benchmark's main: the tools' command line and exit codes (cli/tool_main.h:
// 0; 1 on an error, "NAME: error: ..."; 2 on a command-line mistake, the message and the usage;
// --help / -h the usage on stdout), and 77 with a SKIP line when no CUDA device is visible (what
// ctest and the GPU check's dry run count as skipped). The command line is read first, so --help
// and usage errors answer on a machine without a GPU too.
#include <cstdio>
#include <string>

#include "cli/command_line.h"
#include "cli/tool_main.h"
#include "odc/kernels/cuda_cast.h"

namespace odc::bench {

inline constexpr int kExitSkipped = 77;

// parse() returns the options (throwing cli::UsageError or cli::HelpRequested); run(options)
// measures and prints.
template <typename Parse, typename Run>
int gpu_bench_main(const char* name, Parse&& parse, Run&& run) {
  return cli::run_tool(name, [&] {
    const auto options = parse();
    std::string why;
    if (kernels::cuda::device_count(&why) == 0) {
      std::fprintf(stderr, "SKIP: no CUDA device visible (%s)\n", why.empty() ? "none" : why.c_str());
      return kExitSkipped;
    }
    run(options);
    std::fflush(stdout);
    return cli::kExitSuccess;
  });
}

}  // namespace odc::bench
