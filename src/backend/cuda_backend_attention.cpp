// CudaBackend: which attention kernels run (model.attention; kernels/attention_choice.h) and the
// fallback from cuDNN to the native kernels under auto.
#include <mutex>

#include <spdlog/spdlog.h>

#include "cuda_backend_impl.h"

namespace odc::backend {

namespace cu = kernels::cuda;

const kernels::AttentionChoice& CudaBackend::Impl::select_attention(int n_heads, int n_kv_heads, int head_dim) {
  if (attention_selection && attention_selection->n_heads == n_heads && attention_selection->n_kv_heads == n_kv_heads &&
      attention_selection->head_dim == head_dim) {
    return attention_selection->choice;
  }
  // native decides on nothing: no cuDNN is probed for it.
  kernels::AttentionFacts facts;
  if (attention_mode != kernels::AttentionMode::native) {
    facts = cu::device_attention_facts(device, n_heads, n_kv_heads, head_dim);
  }
  facts.mode = attention_mode;
  kernels::AttentionChoice choice = kernels::choose_attention(facts);  // odc::Error for an impossible cudnn
  if (choice.impl == kernels::AttentionImpl::cudnn && !cudnn_attention) {
    cudnn_attention = std::make_unique<cu::CudnnAttention>(facts.deterministic, 16, cudnn_workspace_bytes);
    const kernels::CudartChoice& cudart = cu::pin_frontend_cudart();
    spdlog::info("attention: the cuDNN frontend's CUDA runtime: {} ({})", cudart.name, cudart.why);
  }
  attention_selection = AttentionSelection{n_heads, n_kv_heads, head_dim, std::move(choice)};
  return attention_selection->choice;
}

bool CudaBackend::Impl::use_cudnn(const cu::CudaAttentionShape& s) {
  // Key segments (context parallelism) always run on the native kernels: our cuDNN graphs give Q
  // and K/V the same ragged offsets and sequence lengths and the top-left causal diagonal, so they
  // would compute a wrong mask for a query chunk that attends to keys before it. cuDNN could do it
  // (separate K/V ragged offsets and lengths, the BOTTOM_RIGHT diagonal), but that is a new graph
  // class no GPU check has proven yet.
  if (s.cu_seqlens_k != nullptr) return false;
  return select_attention(s.n_heads, s.n_kv_heads, s.head_dim).impl == kernels::AttentionImpl::cudnn;
}

void CudaBackend::Impl::cudnn_failed(const Error& error, const char* what) {
  if (attention_mode == kernels::AttentionMode::cudnn) throw error;
  spdlog::warn("model.attention: auto: cuDNN's {} failed, the native attention kernels run from now on: {}", what,
               error.what());
  attention_selection->choice = {kernels::AttentionImpl::native,
                                 std::string("native kernels (model.attention: auto; cuDNN failed: ") + error.what() +
                                     ")"};
}

void CudaBackend::Impl::cudnn_declined() const {
  // Once per process: a run meets the same shape classes microbatch after microbatch, and the
  // choice is the shape class's alone (CudnnAttentionStats::fallbacks counts the calls).
  static std::once_flag logged;
  std::call_once(logged, [&] { spdlog::warn("{} (logged once)", cudnn_attention->refusal()); });
}

std::string CudaBackend::select_attention(int n_heads, int n_kv_heads, int head_dim) {
  const kernels::AttentionChoice& c = impl_->select_attention(n_heads, n_kv_heads, head_dim);
  return std::string(kernels::attention_impl_name(c.impl)) + ": " + c.reason;
}

kernels::AttentionImpl CudaBackend::attention_impl() const {
  return impl_->attention_selection ? impl_->attention_selection->choice.impl : kernels::AttentionImpl::native;
}

}  // namespace odc::backend
