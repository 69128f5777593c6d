#pragma once
// What a part of the trainer will allocate, known before it is built: named byte counts, each with
// the rule that sizes it, in the compute device's memory or in host memory. Each part reports its
// own (the comm and its transports: comm_buffers.h; the backend: Backend's planned_workspaces;
// the model: model::activation_bytes) and the memory plan (train/plan/memory_plan.h) lists them.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace odc {

struct PlannedBytes {
  std::string name;    // e.g. "gradient slots"
  std::string rule;    // how it is sized, e.g. "4 ranks x comm.max_inflight 8 x a chunk of 262.1K floats"
  std::int64_t bytes = 0;
  bool on_device = true;  // the compute device's memory (on the CPU: the same host memory)
  bool pooled = true;     // allocated through the backend's allocator (a GPU's pool statistics see it)
};

// A part's planned allocations in order, and what it does not size.
struct PlannedMemory {
  std::vector<PlannedBytes> items;
  std::vector<std::string> notes;
  // Adds an item; nothing when `bytes` <= 0.
  void add(std::string name, std::int64_t bytes, std::string rule, bool on_device = true, bool pooled = true);
  void note(std::string text) { notes.push_back(std::move(text)); }
  void append(PlannedMemory other);
  const PlannedBytes* find(std::string_view name) const;
};

// The texts the rules are written in: "12.5 MiB", and a count as "1.20M".
std::string mib_text(std::int64_t bytes);
std::string count_text(std::int64_t n);

}  // namespace odc
