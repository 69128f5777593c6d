#include "odc/backend/backend_factory.h"

#include <string>

#include "odc/backend/cpu_backend.h"
#include "odc/core/error.h"
#include "odc/kernels/attention_choice.h"
#if defined(ODC_HAVE_CUDA)
#include "odc/backend/cuda_backend.h"
#include "odc/kernels/cuda_cast.h"
#endif

namespace odc::backend {

bool cuda_backend_built() {
#if defined(ODC_HAVE_CUDA)
  return true;
#else
  return false;
#endif
}

namespace {

std::unique_ptr<Backend> make_cpu(DType dtype, int threads) {
  // bfloat16 on the CPU: the CpuBackend's bf16 mode, rounding at the points the CUDA path rounds.
  if (dtype == DType::f32 || dtype == DType::bf16) return std::make_unique<CpuBackend>(threads, dtype);
  fail("model.dtype={} on model.device=cpu: the CPU backend computes in float32 or bfloat16", dtype_name(dtype));
}

std::unique_ptr<Backend> make_cuda(DType dtype, int local_rank, kernels::AttentionMode attention,
                                   std::int64_t cudnn_workspace_mib) {
  if (dtype != DType::bf16) {
    fail("model.dtype={} on model.device=cuda: the CUDA kernels compute in bfloat16 (fp32 masters and "
         "gradients); set model.dtype: bfloat16",
         dtype_name(dtype));
  }
#if defined(ODC_HAVE_CUDA)
  std::string why;
  const int count = kernels::cuda::device_count(&why);
  if (count < 1) {
    fail("model.device=cuda: no usable CUDA device ({}); use model.device: cpu", why.empty() ? "none visible" : why);
  }
  return std::make_unique<CudaBackend>(local_rank % count, attention, cudnn_workspace_mib << 20);
#else
  (void)local_rank, (void)attention, (void)cudnn_workspace_mib;
  fail("model.device=cuda: this build has no CUDA backend (configure with nvcc present, -DODC_CUDA=ON); use "
       "model.device: cpu");
#endif
}

}  // namespace

std::unique_ptr<Backend> make_backend(std::string_view device, DType dtype, int threads, int local_rank,
                                      std::string_view attention, std::int64_t cudnn_workspace_mib) {
  const kernels::AttentionMode mode = kernels::parse_attention_mode(attention);
  if (device == "cpu") {
    if (mode == kernels::AttentionMode::cudnn) {
      fail("model.attention=cudnn on model.device=cpu: cuDNN's attention runs on a GPU only; set model.attention: "
           "auto or native (the CPU backend always runs its own attention kernel)");
    }
    return make_cpu(dtype, threads);
  }
  if (device == "cuda") return make_cuda(dtype, local_rank < 0 ? 0 : local_rank, mode, cudnn_workspace_mib);
  fail("model.device: unknown device '{}': expected cpu or cuda", device);
}

}  // namespace odc::backend
