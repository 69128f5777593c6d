#include "odc/distributed/comm/comm.h"

#include "odc/core/error.h"

namespace odc::distributed {

CommKind parse_comm_kind(std::string_view name) {
  if (name == "odc") return CommKind::odc;
  if (name == "collective") return CommKind::collective;
  fail("unknown comm '{}': expected odc or collective", name);
}

std::string_view comm_kind_name(CommKind kind) { return kind == CommKind::odc ? "odc" : "collective"; }

GatherDtype parse_gather_dtype(std::string_view name) {
  if (name == "fp32") return GatherDtype::f32;
  if (name == "bf16") return GatherDtype::bf16;
  fail("unknown comm.gather_dtype '{}': expected fp32 or bf16", name);
}

std::string_view gather_dtype_name(GatherDtype dtype) { return dtype == GatherDtype::f32 ? "fp32" : "bf16"; }

bool needs_equal_microbatches(CommKind kind, int world_size) { return kind == CommKind::collective && world_size > 1; }

}  // namespace odc::distributed
