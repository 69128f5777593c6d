// The facts a device offers the attention choice (kernels/cuda_cudnn_attention.h): host code over
// the CUDA build's queries, compiled only with CUDA.
#if defined(ODC_HAVE_CUDA)
#include "odc/kernels/attention_choice.h"
#include "odc/kernels/cuda_cudnn_attention.h"

namespace odc::kernels::cuda {

AttentionFacts device_attention_facts(int device, int n_heads, int n_kv_heads, int head_dim) {
  AttentionFacts f;
  f.frontend_built = cudnn_frontend_built();
  f.n_heads = n_heads;
  f.n_kv_heads = n_kv_heads;
  f.head_dim = head_dim;
  f.dtype = DType::bf16;
  f.deterministic = true;
  if (f.frontend_built) {
    f.cudnn_version = cudnn_runtime_version(&f.cudnn_load_error);
    const int cc = compute_capability(device);
    f.cc_major = cc / 10;
    f.cc_minor = cc % 10;
  }
  return f;
}

}  // namespace odc::kernels::cuda
#endif
