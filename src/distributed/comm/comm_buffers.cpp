#include "odc/distributed/comm/comm_buffers.h"

#include <algorithm>

#include <fmt/format.h>

#include "odc/distributed/comm/unit_buffer_pool.h"
#include "odc/distributed/transport/ipc/ipc_buffers.h"
#include "odc/distributed/transport/ucx/ucx_buffers.h"

namespace odc::distributed {

namespace {

constexpr std::int64_t kF32 = 4;
constexpr std::int64_t kBf16 = 2;

// NcclComm (CUDA builds) with bf16 gathers: the shadow it gathers from and its staging.
void plan_bf16_gathers(const CommShape& s, PlannedMemory& m) {
  m.add("bf16 shadow of the masters", s.owned * kBf16, fmt::format("{} owned elements x 2 B", count_text(s.owned)));
  m.add("bf16 gather staging", UnitBufferPool::kWeightBuffers * s.largest_padded * kBf16,
        fmt::format("{} x the largest unit x 2 B", UnitBufferPool::kWeightBuffers));
}

// StagedComm serving device state: the inner comm's host store (its masters in the transport's
// region), the device copies of the units the model holds, and the accumulated gradients' upload.
void plan_staging(const CommShape& s, PlannedMemory& m) {
  m.add("host copy of the state (staged)", 4 * s.owned * kF32,
        fmt::format("the host comm's masters, gradients and moments: 4 x {} owned elements x 4 B", count_text(s.owned)),
        false);
  m.add("staged unit buffers (estimate)", s.pool_floats * kF32,
        "the device copies of the units the model holds: as the unit buffers");
  m.add("staged gradient upload", s.owned * kF32,
        fmt::format("the host accumulators on their way to the device: {} x 4 B", count_text(s.owned)));
}

}  // namespace

CommShape comm_shape(const ShardLayout& layout) {
  CommShape s;
  s.world = layout.world_size();
  s.owned = layout.owned_elements();
  s.largest_padded = layout.largest_padded_unit();
  s.pool_floats = UnitBufferPool::planned_floats(layout);
  for (int u = 0; u < layout.num_units(); ++u) s.largest_shard = std::max(s.largest_shard, layout.unit(u).shard);
  return s;
}

TransportOptions odc_transport_options(const CommOptions& options, CommBuild build, std::int64_t largest_shard) {
  TransportOptions t = options.transport;
  t.push_buffers = UnitBufferPool::kGradBuffers;
  if (build == CommBuild::odc_ucx) t.slot_floats = std::max(t.slot_floats, largest_shard);
  return t;
}

IpcShape ipc_shape(const CommOptions& options, const CommShape& shape) {
  IpcShape ipc;
  ipc.owned = shape.owned;
  ipc.largest_shard = shape.largest_shard;
  ipc.largest_unit = shape.largest_padded;
  ipc.gather_buffers = UnitBufferPool::kWeightBuffers;
  ipc.bf16_gathers = options.gather_dtype == GatherDtype::bf16;
  ipc.deterministic = options.deterministic;
  return ipc;
}

PlannedMemory planned_buffers(const CommChoice& choice, const CommOptions& options, const CommShape& s,
                              bool device_state, int ranks_on_host) {
  PlannedMemory m;
  if (choice.build == CommBuild::local) return m;
  const int w = s.world;
  // A staged comm's inner comm moves host memory: its unit buffers are the host's.
  const bool staged_device = choice.staged && device_state;
  m.add("unit buffers", s.pool_floats * kF32,
        fmt::format("{} weight + {} gradient fp32 buffers: one of the largest unit ({} elements), the others of "
                    "the next largest",
                    UnitBufferPool::kWeightBuffers, UnitBufferPool::kGradBuffers, count_text(s.largest_padded)),
        !staged_device);
  switch (choice.build) {
    case CommBuild::local:
      break;
    case CommBuild::nccl_collective:
    case CommBuild::mpi_collective:
      m.add("reduce-scatter receive buffers", UnitBufferPool::kGradBuffers * s.largest_shard * kF32,
            fmt::format("{} x the largest shard ({} elements) x 4 B", UnitBufferPool::kGradBuffers,
                        count_text(s.largest_shard)));
      if (choice.build == CommBuild::nccl_collective) {
        if (options.gather_dtype == GatherDtype::bf16) plan_bf16_gathers(s, m);
        break;
      }
      // MPI_Reduce_scatter's own temporaries: Open MPI's algorithms hold about the full unit.
      m.add("MPI collective temporaries (estimate)", s.largest_padded * kF32, "about one largest unit x 4 B");
      if (choice.staged) m.note("debug.host_staging: the staged host comm's own buffers are not sized");
      break;
    case CommBuild::odc_ipc:
      m.append(ipc_planned_buffers(ipc_shape(options, s), options.transport, w, device_state));
      break;
    case CommBuild::odc_ucx: {
      if (choice.staged && !device_state) {
        m.note("ODC over UCX with device state is staged through host memory: the host-side copy of the shards and "
               "unit buffers is not sized");
      }
      const TransportOptions t = odc_transport_options(options, choice.build, s.largest_shard);
      m.append(ucx_planned_buffers(t, w, s.owned, ranks_on_host, !choice.staged, !device_state));
      if (options.deterministic) {
        // PushAccumulator's per-client buffers, on the host: one per client rank, each the owned shard.
        m.add("deterministic accumulator", static_cast<std::int64_t>(w) * s.owned * kF32,
              fmt::format("{} clients x {} owned elements x 4 B", w, count_text(s.owned)), !staged_device);
      }
      if (staged_device) plan_staging(s, m);
      break;
    }
  }
  return m;
}

}  // namespace odc::distributed
