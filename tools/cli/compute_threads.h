#pragma once
// --threads N of the tools that compute on the CPU (odc-eval, odc-generate): parsed once, with the
// bound train.threads has (odc/core/thread_limit.h); a value outside it is a usage error (exit 2).
#include <cstdint>
#include <thread>

#include <fmt/format.h>

#include "cli/command_line.h"
#include "odc/core/thread_limit.h"

namespace odc::cli {

inline int compute_threads(const Arguments& args) {
  const std::int64_t threads = args.integer("--threads", 1, Range::at_least(1).and_at_most(kMaxComputeThreads));
  if (threads > max_compute_threads()) {
    throw args.usage_error(fmt::format("--threads {} is more than 4 x the {} hardware threads of this machine (at "
                                       "most {}): that many threads would only slow the work down",
                                       threads, std::thread::hardware_concurrency(), max_compute_threads()));
  }
  return static_cast<int>(threads);
}

}  // namespace odc::cli
