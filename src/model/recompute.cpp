#include "odc/model/recompute.h"

#include <algorithm>

#include "odc/core/error.h"

namespace odc::model {

Recompute parse_recompute(std::string_view text, std::string_view key) {
  if (text == "none") return Recompute::none;
  if (text == "selective") return Recompute::selective;
  if (text == "full") return Recompute::full;
  fail("{}: unknown recomputation '{}': expected none, selective or full", key, text);
}

std::string_view recompute_name(Recompute mode) {
  switch (mode) {
    case Recompute::none: return "none";
    case Recompute::selective: return "selective";
    case Recompute::full: return "full";
  }
  return "?";
}

// Mirrors the buffers of decoder_layer.h (LayerBuffers, Scratch) and what llama_model.cpp asks of
// them per microbatch; tests/unit/model/test_recompute.cpp holds the two equal.
ActivationBytes activation_bytes(const LlamaConfig& config, DType act, std::int64_t tokens, Recompute mode,
                                 std::int64_t head_chunk_rows, std::int64_t sequences, bool uploads_copy) {
  ODC_CHECK(tokens >= 0 && head_chunk_rows > 0 && sequences >= 0, "activation_bytes: {} tokens, {} rows, {} sequences",
            tokens, head_chunk_rows, sequences);
  const std::int64_t a = dtype_size(act);
  const std::int64_t t = tokens;
  const std::int64_t c = config.hidden_size, q = config.q_dim(), kv = config.kv_dim(), f = config.intermediate_size;
  const std::int64_t v = config.vocab_size, heads = config.num_attention_heads, kv_heads = config.num_key_value_heads;
  const std::int64_t layers = config.num_hidden_layers;
  const bool qk = config.qk_norm;

  // One layer's kept set under `none` (LayerBuffers): activation-dtype tensors and fp32 statistics.
  const std::int64_t layer_act = 3 * c + 2 * q + 2 * kv + 2 * f + (qk ? q + kv : 0);
  const std::int64_t layer_f32 = heads + 2 + (qk ? heads + kv_heads : 0);
  const std::int64_t one_layer = t * (layer_act * a + layer_f32 * 4);
  // What selective keeps per layer: the attention output and its log-sum-exp.
  const std::int64_t attention_only = t * (q * a + heads * 4);

  ActivationBytes out;
  out.layer_inputs = (layers + 1) * t * c * a;
  switch (mode) {
    case Recompute::none: out.kept = layers * one_layer; break;
    case Recompute::selective: out.kept = layers * attention_only; out.working = one_layer - attention_only; break;
    case Recompute::full: out.working = one_layer; break;
  }
  if (layers == 0) out.working = 0;
  // Scratch: the layers' gradients and the SwiGLU product, the RoPE tables, the head's rows.
  if (t > 0) {
    const std::int64_t chunk = head_chunk_rows;
    out.working += t * (4 * f + 2 * q + 2 * kv + 2 * c) * a;           // h, dh, dgate_up (2f), dq, dattn, dk, dv, dxn, dx
    out.working += 2 * t * (config.head_dim / 2) * 4;                    // cos, sin
    out.working += 2 * t * c * a + t * 4;                                // xf, dxf, rstd_f
    out.working += chunk * (2 * c + v) * a + chunk * 4;                  // chunk_in, chunk_dx, chunk_logits, chunk_nll
    if (uploads_copy) {
      out.working += 2 * t * 4 + (sequences + 1) * 4;                    // tokens, positions, cu_seqlens
      out.working += t * (4 + 4 + 4);  // the target rows, their targets and weights (every token a target)
    }
  }
  return out;
}

}  // namespace odc::model
