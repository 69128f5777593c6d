#include "odc/data/attention_window.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "odc/core/error.h"

namespace odc::data {

std::string attention_window_origin(const std::string& checkpoint, const std::string& model_config_origin) {
  if (!checkpoint.empty()) return fmt::format("sliding_window in {}", (std::filesystem::path(checkpoint) / "config.json").string());
  return fmt::format("model.config.attention_window, from {}", model_config_origin);
}

void check_attention_window(const data::TokenDataset& dataset, std::int64_t count, const model::LlamaConfig& model,
                            const std::string& origin, const std::string& consequence, const std::string& remedy) {
  const std::int64_t window = model.attention_window;
  if (window <= 0 || dataset.max_length() <= window) return;  // nothing to look for record by record
  for (std::int64_t i = 0; i < std::min(count, dataset.size()); ++i) {
    if (dataset.length(i) > window) {
      fail("{}: sequence {} has length {}, longer than the model's attention window of {} tokens ({}): the original "
           "model attends only to the last {} tokens, attention here spans the whole sequence, so {}; {}",
           dataset.record(i), i, dataset.length(i), window, origin, window, consequence, remedy);
    }
  }
}

}  // namespace odc::data
