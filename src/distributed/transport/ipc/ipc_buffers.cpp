#include "odc/distributed/transport/ipc/ipc_buffers.h"

#include <algorithm>

#include <fmt/format.h>

namespace odc::distributed {

std::int64_t ipc_slot_floats(const TransportOptions& options, std::int64_t largest_shard) {
  const std::int64_t chunk_floats = std::max<std::int64_t>(1, options.chunk_bytes / static_cast<std::int64_t>(sizeof(float)));
  return std::min(chunk_floats, std::max<std::int64_t>(1, largest_shard));
}

PlannedMemory ipc_planned_buffers(const IpcShape& shape, const TransportOptions& options, int world,
                                  bool device_state) {
  PlannedMemory m;
  const std::int64_t w = world;
  const std::int64_t chunk = ipc_slot_floats(options, shape.largest_shard);
  const std::int64_t inflight = std::max(options.max_inflight, 1);
  const std::int64_t slots = chunk * 4 * w * inflight;
  m.add("gradient slots", slots,
        fmt::format("{} ranks x comm.max_inflight {} x a chunk of {} floats", w, options.max_inflight, count_text(chunk)));
  if (shape.bf16_gathers) {
    m.add("bf16 shadow of the masters", shape.owned * 2, fmt::format("{} owned elements x 2 B", count_text(shape.owned)));
    m.add("bf16 gather staging", shape.gather_buffers * shape.largest_unit * 2,
          fmt::format("{} x the largest unit x 2 B", shape.gather_buffers));
  }
  if (shape.deterministic) {
    m.add("per-client accumulators", shape.owned * 4 * w,
          fmt::format("{} ranks x {} owned elements x 4 B", w, count_text(shape.owned)));
  }
  if (!device_state) {
    // Host shared memory: the pages of the peers' regions this rank reads or writes are in its
    // resident set too (shared, not allocated here).
    const std::int64_t read = shape.bf16_gathers ? shape.owned * 2 : shape.owned * 4;
    m.add("peers' regions mapped here", (w - 1) * (read + slots),
          fmt::format("{} peers x (their {} + their slots), shared memory", w - 1,
                      shape.bf16_gathers ? "bf16 shadow" : "master shards"));
  }
  return m;
}

}  // namespace odc::distributed
