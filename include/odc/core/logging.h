#pragma once
// Logging setup (spdlog). The default logger prints "[rank R] message"; only rank 0 logs at info
// level unless ODC_LOG_ALL_RANKS=1. Levels: trace, debug, info, warn, error.
#include <string>

#include <spdlog/spdlog.h>

namespace odc {

void setup_logging(int rank, int world_size, const std::string& level = "info");

}  // namespace odc
