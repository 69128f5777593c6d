#include "odc/kernels/attention_choice.h"

#include <fmt/format.h>

#include "odc/core/error.h"

namespace odc::kernels {

AttentionMode parse_attention_mode(std::string_view text) {
  if (text == "auto") return AttentionMode::automatic;
  if (text == "cudnn") return AttentionMode::cudnn;
  if (text == "native") return AttentionMode::native;
  fail("model.attention: unknown value '{}': expected auto, cudnn or native", text);
}

std::string_view attention_mode_name(AttentionMode mode) {
  switch (mode) {
    case AttentionMode::automatic: return "auto";
    case AttentionMode::cudnn: return "cudnn";
    case AttentionMode::native: return "native";
  }
  return "?";
}

std::string_view attention_impl_name(AttentionImpl impl) {
  return impl == AttentionImpl::cudnn ? "cudnn" : "native";
}

std::string cudnn_version_text(int version) {
  if (version <= 0) return "none";
  return fmt::format("{}.{}.{}", version / 10000, version / 100 % 100, version % 100);
}

std::optional<std::string> cudnn_attention_blocker(const AttentionFacts& f) {
  if (!f.frontend_built) return std::string("built without the cuDNN frontend");
  if (f.cudnn_version <= 0) {
    return fmt::format("no cuDNN library could be loaded ({})",
                       f.cudnn_load_error.empty() ? "libcudnn.so.9 not found" : f.cudnn_load_error);
  }
  if (f.cudnn_version < kCudnnMinVersion) {
    return fmt::format("the loaded cuDNN {} is older than {} (ragged packed sequences with token-major stats)",
                       cudnn_version_text(f.cudnn_version), cudnn_version_text(kCudnnMinVersion));
  }
  if (f.cudnn_version == 91000 || f.cudnn_version == 91001) {
    return fmt::format("the loaded cuDNN {} has a known bf16 attention backward bug (use 9.10.2 or newer)",
                       cudnn_version_text(f.cudnn_version));
  }
  if (f.cc_major < 8) {
    return fmt::format("compute capability {}.{} is below 8.0 (cuDNN's fused attention needs Ampere or newer)",
                       f.cc_major, f.cc_minor);
  }
  if (f.dtype != DType::bf16) {
    return fmt::format("dtype {}: the cuDNN path computes in bfloat16 only", dtype_name(f.dtype));
  }
  if (f.head_dim != 64 && f.head_dim != 128) {
    return fmt::format("head_dim {} (the cuDNN path is built for 64 and 128)", f.head_dim);
  }
  if (f.n_heads <= 0 || f.n_kv_heads <= 0 || f.n_heads % f.n_kv_heads != 0) {
    return fmt::format("{} query heads are not a whole number of groups of {} kv heads", f.n_heads, f.n_kv_heads);
  }
  if (f.deterministic && (f.cc_major == 8 || f.cc_major == 12)) {
    return fmt::format("cuDNN has no deterministic backward for packed sequences on compute capability {}.{}",
                       f.cc_major, f.cc_minor);
  }
  if (f.deterministic && f.cc_major == 10 && f.cudnn_version < kCudnnBlackwellDeterministicVersion) {
    return fmt::format("a deterministic backward on compute capability {}.{} needs cuDNN {} (loaded: {})",
                       f.cc_major, f.cc_minor, cudnn_version_text(kCudnnBlackwellDeterministicVersion),
                       cudnn_version_text(f.cudnn_version));
  }
  return std::nullopt;
}

AttentionChoice choose_attention(const AttentionFacts& f) {
  if (f.mode == AttentionMode::native) return {AttentionImpl::native, "native kernels (model.attention: native)"};
  if (const auto blocker = cudnn_attention_blocker(f)) {
    if (f.mode == AttentionMode::cudnn) {
      fail("model.attention=cudnn: cuDNN's fused attention cannot run here: {}; set model.attention: auto or native",
           *blocker);
    }
    return {AttentionImpl::native, fmt::format("native kernels (model.attention: auto; cuDNN not used: {})", *blocker)};
  }
  if (f.mode == AttentionMode::automatic && !f.auto_takes_cudnn) {
    return {AttentionImpl::native,
            fmt::format("native kernels (model.attention: auto; cuDNN {} could serve, but auto takes it only once its "
                        "path has passed the GPU check: set model.attention: cudnn to use it)",
                        cudnn_version_text(f.cudnn_version))};
  }
  return {AttentionImpl::cudnn,
          fmt::format("cuDNN {} fused flash attention (model.attention: {}; compute capability {}.{}, {} heads over "
                      "{} kv heads, head_dim {}, {} backward)",
                      cudnn_version_text(f.cudnn_version), attention_mode_name(f.mode), f.cc_major, f.cc_minor,
                      f.n_heads, f.n_kv_heads, f.head_dim, f.deterministic ? "deterministic" : "non-deterministic")};
}

}  // namespace odc::kernels
