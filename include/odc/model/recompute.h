#pragma once
// Activation recomputation (train.recompute) and the activation memory it leaves.
//
//   none       every decoder layer keeps all it computed in forward for its backward
//   selective  a layer keeps its input (as every mode does), its attention output and the
//              attention's log-sum-exp; backward recomputes the norms, projections, RoPE, the
//              output projection and the MLP's inputs from them (never the attention itself)
//   full       a layer keeps only its input; backward recomputes its whole forward
//
// The recomputed forward runs the same kernels on the same inputs as the first one, so gradients
// are bitwise those of `none`. It runs inside the unit's backward, on the weights the backward has
// already acquired: no unit is gathered more often than without recomputation.
#include <cstdint>
#include <string_view>

#include "odc/core/dtype.h"
#include "odc/model/llama_config.h"

namespace odc::model {

enum class Recompute : std::uint8_t { none, selective, full };

// "none" | "selective" | "full"; anything else is an odc::Error naming `key`.
Recompute parse_recompute(std::string_view text, std::string_view key = "train.recompute");
std::string_view recompute_name(Recompute mode);

// The bytes a LlamaModel holds for activations and scratch once it has trained a microbatch of
// `tokens` tokens (LlamaModel::activation_bytes() after that microbatch): the layers' inputs, what
// each layer keeps for its backward under `mode`, one layer's working set (recomputation and the
// backward's gradients), the head's buffers for `head_chunk_rows` rows per chunk
// (Backend::head_chunk_rows) and the microbatch's index data. `act` is the activation dtype.
struct ActivationBytes {
  std::int64_t layer_inputs = 0;  // x[0..L]: every layer's input and the head's
  std::int64_t kept = 0;          // what the layers keep for backward (all layers)
  std::int64_t working = 0;       // one layer's recomputed / scratch buffers and the head's
  std::int64_t total() const { return layer_inputs + kept + working; }
};
// `sequences`: the packed sequences of the microbatch; `uploads_copy`: whether the backend copies
// the microbatch's index data into its own memory (a device backend) or aliases the host's (CPU).
ActivationBytes activation_bytes(const LlamaConfig& config, DType act, std::int64_t tokens, Recompute mode,
                                 std::int64_t head_chunk_rows, std::int64_t sequences = 1, bool uploads_copy = true);

}  // namespace odc::model
