#pragma once
// What a backend of a kind allocates beside the model's activations (model::activation_bytes) and
// its weight copies (weight_copy_element_bytes), known without creating it (a plan for a GPU is
// made on any machine): the attention's scratch and cuDNN workspace, the GEMM library's workspace,
// the runtime's own. The memory plan (train/plan/memory_plan.h) lists them.
#include <cstdint>
#include <string_view>

#include "odc/core/dtype.h"
#include "odc/core/planned_memory.h"

namespace odc::backend {

// Whether the attention of a backend of `kind` under model.attention `attention` is planned on
// cuDNN: a CUDA backend with cudnn, or auto once auto takes cuDNN (kernels::kAutoTakesCudnn; the
// device's facts are not known here, so such an auto is counted as cuDNN).
bool plans_cudnn_attention(DeviceKind kind, std::string_view attention);

struct WorkspaceFacts {
  std::int64_t tokens = 0;  // the microbatch's token count (the cap)
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  bool cudnn_attention = false;           // plans_cudnn_attention
  std::int64_t cudnn_workspace_limit = 0;  // bytes: model.cudnn_workspace_mib
};

// The workspaces in order (none on the CPU, whose kernels work in the activations' buffers).
PlannedMemory planned_workspaces(DeviceKind kind, const WorkspaceFacts& facts);

}  // namespace odc::backend
