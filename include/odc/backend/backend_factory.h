#pragma once
// The one place a compute backend is chosen (model.device, model.dtype): the trainer, inference
// and calibration construct their model's backend here.
//
//   device "cpu"   CpuBackend: float32 (bfloat16: the CPU backend's bf16 mode, where built)
//   device "cuda"  CudaBackend on GPU local_rank % count (bfloat16 compute; fp32 masters and gradients), in a
//                  build with CUDA and with a visible device
// Anything else is an odc::Error naming the key and the value.
#include <memory>
#include <string_view>

#include "odc/backend/backend.h"
#include "odc/kernels/cudnn_ragged.h"

namespace odc::backend {

// Whether this build has the CUDA backend (CMake found nvcc and built the CUDA kernels).
bool cuda_backend_built();

// `threads`: the CPU backend's compute threads (>= 1); the CUDA backend ignores it.
// `local_rank`: this rank among the ranks of its host; the CUDA backend runs on GPU
// local_rank % (visible GPUs), so ranks spread over a node's GPUs and may share one.
// `attention`: model.attention (auto | cudnn | native; kernels/attention_choice.h): which attention
// kernels the CUDA backend runs; on the CPU, cudnn is an odc::Error and the others the CPU kernels.
// `cudnn_workspace_mib`: model.cudnn_workspace_mib, the most workspace a cuDNN attention call may
// take (kernels/cudnn_ragged.h); the CPU ignores it.
std::unique_ptr<Backend> make_backend(std::string_view device, DType dtype, int threads, int local_rank = 0,
                                      std::string_view attention = "auto",
                                      std::int64_t cudnn_workspace_mib = kernels::kCudnnWorkspaceLimitMiB);

}  // namespace odc::backend
