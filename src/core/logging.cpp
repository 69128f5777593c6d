#include "odc/core/logging.h"

#include <cstdlib>
#include <string_view>

#include <spdlog/sinks/stdout_color_sinks.h>

namespace odc {

void setup_logging(int rank, int world_size, const std::string& level) {
  const char* all = std::getenv("ODC_LOG_ALL_RANKS");
  const bool all_ranks = all != nullptr && std::string_view(all) == "1";
  auto logger = spdlog::stderr_color_mt(fmt::format("odc-{}", rank));
  if (world_size > 1) {
    logger->set_pattern(fmt::format("[%H:%M:%S.%e] [%^%l%$] [rank {}] %v", rank));
  } else {
    logger->set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
  }
  auto parsed = spdlog::level::from_str(level);
  if (rank != 0 && !all_ranks && parsed < spdlog::level::warn) parsed = spdlog::level::warn;
  logger->set_level(parsed);
  spdlog::set_default_logger(logger);
}

}  // namespace odc
