#pragma once
// Which kernels run the packed causal attention on a GPU (model.attention): this project's own
// (kernels/cuda_attention.h, "native") or cuDNN's fused flash attention through the cuDNN
// frontend's graph API (kernels/cuda_cudnn_attention.h). A pure decision over plain facts, so it
// is tested without a GPU; the CUDA backend gathers the facts (build, loaded cuDNN, device, model
// shape) and logs the reason with the choice.
//
//   native  always the native kernels
//   cudnn   cuDNN, or an odc::Error naming model.attention and what rules it out
//   auto    cuDNN where every rule below allows it (once kAutoTakesCudnn), else native with the reason
//
// cuDNN is ruled out (in this order) when: the build has no cuDNN frontend header; no cuDNN
// library could be loaded; the loaded cuDNN is older than 9.6.0 (ragged stats output) or is
// 9.10.0/9.10.1 (broken bf16 backward); the device is below compute capability 8.0; the dtype is
// not bfloat16; head_dim is not 64 or 128; the heads are not a whole number of kv groups; a
// deterministic backward is required and cuDNN has none for packed sequences on the device
// (compute capability 8.x and 12.x) or the cuDNN is too old for it (10.x below 9.18.0).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "odc/core/dtype.h"

namespace odc::kernels {

enum class AttentionMode : std::uint8_t { automatic, cudnn, native };
enum class AttentionImpl : std::uint8_t { native, cudnn };

// "auto" | "cudnn" | "native"; anything else is an odc::Error naming model.attention.
AttentionMode parse_attention_mode(std::string_view text);
std::string_view attention_mode_name(AttentionMode mode);
std::string_view attention_impl_name(AttentionImpl impl);

// The oldest cuDNN the fused path uses (9.6.0: ragged, token-major stats), as cudnnGetVersion()
// reports it (major * 10000 + minor * 100 + patch for cuDNN 9).
inline constexpr int kCudnnMinVersion = 90600;
// The oldest cuDNN with a deterministic fused backward on compute capability 10.x (9.18.0).
inline constexpr int kCudnnBlackwellDeterministicVersion = 91800;

// Whether auto takes cuDNN where the rules allow it. Off until the cuDNN path has passed the GPU
// check (parity against the native kernels, bitwise reruns: docs/attention.md): until then auto
// runs the native kernels and says so, and model.attention: cudnn opts in.
inline constexpr bool kAutoTakesCudnn = false;

struct AttentionFacts {
  AttentionMode mode = AttentionMode::automatic;
  bool auto_takes_cudnn = kAutoTakesCudnn;
  bool frontend_built = false;   // compiled with the cuDNN frontend header
  int cudnn_version = 0;         // of the loaded library; 0 = none could be loaded
  std::string cudnn_load_error;  // why none could be loaded (for the reason), may be empty
  int cc_major = 0, cc_minor = 0;
  int n_heads = 0, n_kv_heads = 0, head_dim = 0;
  DType dtype = DType::bf16;
  bool deterministic = true;  // the backward must give the same bits run to run
};

struct AttentionChoice {
  AttentionImpl impl = AttentionImpl::native;
  std::string reason;  // one line for the start-up log
};

// What rules cuDNN out for these facts (the mode is not looked at), or nothing when it can serve.
std::optional<std::string> cudnn_attention_blocker(const AttentionFacts& facts);

// The decision; mode cudnn with a blocker is an odc::Error naming model.attention and the blocker.
AttentionChoice choose_attention(const AttentionFacts& facts);

// "9.19.0" of 91900 (cuDNN 9's numbering; 0 -> "none").
std::string cudnn_version_text(int version);

}  // namespace odc::kernels
