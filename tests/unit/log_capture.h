#pragma once
// Captures what spdlog's default logger writes for one scope (every level), so a test can check
// that a warning was given, and how often.
#include <memory>
#include <sstream>
#include <string>
#include <string_view>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

namespace odc::test {

class LogCapture {
 public:
  LogCapture() : previous_(spdlog::default_logger()) {
    auto logger = std::make_shared<spdlog::logger>("capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(text_));
    logger->set_level(spdlog::level::trace);
    logger->set_pattern("[%l] %v");
    spdlog::set_default_logger(logger);
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  std::string text() const { return text_.str(); }
  // How many times `fragment` occurs in what was logged.
  int count(std::string_view fragment) const {
    const std::string all = text();
    int n = 0;
    for (auto at = all.find(fragment); at != std::string::npos; at = all.find(fragment, at + fragment.size())) ++n;
    return n;
  }

 private:
  std::ostringstream text_;
  std::shared_ptr<spdlog::logger> previous_;
};

}  // namespace odc::test
