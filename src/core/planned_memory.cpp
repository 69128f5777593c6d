#include "odc/core/planned_memory.h"

#include <fmt/format.h>

namespace odc {

void PlannedMemory::add(std::string name, std::int64_t bytes, std::string rule, bool on_device, bool pooled) {
  if (bytes <= 0) return;
  items.push_back({std::move(name), std::move(rule), bytes, on_device, pooled});
}

void PlannedMemory::append(PlannedMemory other) {
  for (auto& item : other.items) items.push_back(std::move(item));
  for (auto& n : other.notes) notes.push_back(std::move(n));
}

const PlannedBytes* PlannedMemory::find(std::string_view name) const {
  for (const auto& item : items) {
    if (item.name == name) return &item;
  }
  return nullptr;
}

std::string mib_text(std::int64_t bytes) { return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / 1048576.0); }

std::string count_text(std::int64_t n) {
  if (n >= 1000000000) return fmt::format("{:.2f}G", static_cast<double>(n) / 1e9);
  if (n >= 1000000) return fmt::format("{:.2f}M", static_cast<double>(n) / 1e6);
  if (n >= 1000) return fmt::format("{:.1f}K", static_cast<double>(n) / 1e3);
  return fmt::format("{}", n);
}

}  // namespace odc
