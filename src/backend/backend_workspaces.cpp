#include "odc/backend/backend_workspaces.h"

#include <fmt/format.h>

#include "odc/kernels/attention_choice.h"
#include "odc/kernels/cuda_gemm.h"
#include "odc/kernels/cudnn_ragged.h"

namespace odc::backend {

namespace {

// What the CUDA runtime, cuBLAS and NCCL hold outside our allocator (the context, handles,
// channel buffers): an estimate, not a measurement of ours; the check compares the allocator's
// peak with the pooled items only.
constexpr std::int64_t kCudaRuntimeBytes = std::int64_t{768} << 20;

// cuDNN's workspace for one attention call (CudnnAttention, from the backend's allocator): at most
// the bound, since a call that needs more runs on the native kernels; less where the token cap's
// worst case (kernels::cudnn_backward_workspace_estimate, an estimate) is smaller.
void plan_cudnn_workspace(const WorkspaceFacts& f, PlannedMemory& m) {
  const std::int64_t estimate = kernels::cudnn_backward_workspace_estimate(f.tokens, f.heads, f.kv_heads, f.head_dim);
  if (estimate > f.cudnn_workspace_limit) {
    m.add("cuDNN attention workspace", f.cudnn_workspace_limit,
          fmt::format("model.cudnn_workspace_mib, the most a call takes (the deterministic backward's worst case at {} "
                      "tokens, an estimate: {})",
                      f.tokens, mib_text(estimate)));
  } else {
    m.add("cuDNN attention workspace", estimate,
          fmt::format("the deterministic backward's worst case at {} tokens, {}/{} heads (an estimate: dP scratch over "
                      "the padded batch + per-token tensors)",
                      f.tokens, f.heads, f.kv_heads));
  }
}

}  // namespace

bool plans_cudnn_attention(DeviceKind kind, std::string_view attention) {
  return kind == DeviceKind::cuda && (attention == "cudnn" || (attention == "auto" && kernels::kAutoTakesCudnn));
}

PlannedMemory planned_workspaces(DeviceKind kind, const WorkspaceFacts& f) {
  PlannedMemory m;
  if (kind == DeviceKind::cpu) return m;
  m.add("attention backward scratch", f.tokens * f.heads * 4, fmt::format("{} tokens x {} heads x 4 B", f.tokens, f.heads));
  if (f.cudnn_attention) plan_cudnn_workspace(f, m);
  m.add("cuBLASLt workspace", static_cast<std::int64_t>(kernels::cuda::Blas::kDefaultWorkspaceBytes), "fixed", true,
        false);
  m.add("CUDA runtime and libraries (estimate)", kCudaRuntimeBytes, "context, handles, NCCL channels", true, false);
  return m;
}

}  // namespace odc::backend
