#pragma once
// One decoder layer's forward and backward over a backend (model-internal): pre-norm attention
// with RoPE and grouped-query heads (Qwen3: q and k RMS-normalized per head before RoPE), then a
// pre-norm SwiGLU MLP, each added into the residual stream. The layer saves exactly what its
// backward reads; the SwiGLU product and the attention probabilities are recomputed in backward,
// and with train.recompute (recompute.h) the forward itself, in part or whole.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "odc/backend/backend.h"
#include "odc/model/context_split.h"
#include "odc/model/llama_config.h"
#include "odc/model/units.h"

namespace odc::model::detail {

// Where a tensor sits inside its unit's flat buffer; offset -1: the model has no such tensor.
struct Slice {
  std::int64_t offset = -1;
  std::int64_t numel = 0;
};
// The tensors of a decoder layer's unit (the same offsets in every layer).
struct LayerSlices {
  // wgu: gate_proj and up_proj as one [2 * intermediate, hidden] matrix (adjacent in the unit:
  // one GEMM computes both, gate then up in each output row).
  Slice in_norm, wq, wk, wv, bq, bk, bv, wo, q_norm, k_norm, post_norm, wgu, wd;
};
LayerSlices layer_slices(const UnitLayout& unit, const LlamaConfig& config);

// The tensor `s` of a unit's buffer, or an empty view where the model has none.
backend::ConstView part(backend::ConstView unit, Slice s);
backend::View part(backend::View unit, Slice s);

struct Dims {
  std::int64_t t, c, q, kv, f, v;
  int heads, kv_heads, head_dim;
  double eps;
};
Dims dims_of(const LlamaConfig& c, std::int64_t tokens);

// Saved activations of one decoder layer (what its backward reads). q_raw, k_raw (the projections
// before the q/k norm) and their per-head rstd_q, rstd_k are used only with qk_norm (an unused
// Buffer holds no memory).
struct LayerBuffers {
  explicit LayerBuffers(backend::Backend& b);
  backend::Buffer xn1, q, k, v, attn, lse, x_mid, rstd1, rstd2, xn2, gate_up, q_raw, k_raw, rstd_q, rstd_k;
  std::int64_t bytes() const;
};

// Views of one layer's kept activations for a microbatch of d.t tokens (layer_views). Under
// recomputation they come from a working set shared by all layers, the attention output and
// log-sum-exp (selective) from the layer's own buffers.
struct LayerViews {
  backend::View xn1, q, k, v, attn, lse, x_mid, rstd1, rstd2, xn2, gate_up, q_raw, k_raw, rstd_q, rstd_k;
};
LayerViews layer_views(LayerBuffers& buffers, const Dims& d, bool qk_norm);
// The same without attn and lse (left empty; the caller places them).
LayerViews layer_views_except_attention(LayerBuffers& buffers, const Dims& d, bool qk_norm);

// How much of a layer's forward runs: all of it (a forward pass), or its recomputation inside the
// backward, which stops at what the backward reads (gate and up: the SwiGLU product and the down
// projection are the backward's own) and, with `except_attention`, takes the attention output and
// log-sum-exp as kept.
enum class ForwardPart { all, recompute, recompute_except_attention };

// Scratch shared by all layers (valid only inside one unit's computation), the head's buffers,
// and the microbatch's index data on the device.
struct Scratch {
  explicit Scratch(backend::Backend& b);
  backend::Buffer h, dh, dgate_up, dq, dk, dv, dattn, dxn, dx, cos, sin;
  backend::Buffer xf, rstd_f, dxf, chunk_in, chunk_logits, chunk_dx, chunk_nll;
  backend::Buffer tokens, positions, cu_seqlens, targets, weights, rows, chunk_targets, chunk_weights;
  // The policy objective (policy_head.h): per head row the sampling policy's and the reference's
  // log-probabilities and the advantages (uploaded once per head), per chunk row the coefficients
  // and entropies.
  backend::Buffer policy_old, policy_ref, policy_advantages, chunk_coef, chunk_entropy;
  // A split microbatch (context_split.h): the keys and values gathered into this member's key
  // segments, their gradients, the copies of its own rows' gradients received, the key bounds.
  backend::Buffer k_keys, v_keys, dk_keys, dv_keys, received, cu_seqlens_k;
  std::int64_t bytes() const;
};

// What a microbatch's layers share: its dims, its attention shape and the RoPE tables.
struct LayerContext {
  Dims d;
  backend::AttentionShape shape;
  backend::ConstView cos, sin;
  // A split microbatch (null: none): every layer gathers the group's keys and values into the key
  // segments of `shape` (key_rows rows) through `exchange`, and its backward returns their
  // gradients to the members holding them, who add the copies (the same pieces every layer).
  const ContextSplit* split = nullptr;
  ContextExchange* exchange = nullptr;
  std::vector<ExchangePiece> key_gather;
  KeyScatter key_scatter;
  std::int64_t key_rows = 0;
  // What each exchange moves, for its errors (named once per microbatch): the keys, the values,
  // and their gradients.
  std::string keys_what, values_what, key_grads_what, value_grads_what;
};

// Scratch of an incremental forward (LlamaModel::forward_cached), owned by the KvCache it runs
// over: sized by the count of new tokens; nothing is saved for a backward.
struct DecodeBuffers {
  explicit DecodeBuffers(backend::Backend& b);
  backend::Buffer x, xn, rstd, q, attn, gate_up, h, cos, sin, xf, logits, tokens, positions;
  backend::Buffer q_raw, k_raw, head_rstd;  // qk_norm only
  backend::Buffer k_rows, v_rows;           // several sequences: the new keys and values before their caches
  std::vector<std::int32_t> host_positions;
  // Several sequences: their cached rows and a layer's caches (Backend::attention_decode_batch).
  std::vector<std::int64_t> past;
  std::vector<backend::View> k_caches, v_caches;
  std::int64_t bytes() const;
};

// x_out is written only by ForwardPart::all.
void layer_forward(backend::Backend& b, const LayerContext& ctx, const LayerSlices& o, backend::ConstView w,
                   const LayerViews& saved, backend::ConstView x_in, backend::View x_out, Scratch& s,
                   ForwardPart part = ForwardPart::all);

// On entry s.dx holds dL/dx_out; on exit dL/dx_in. Weight gradients are added into g.
void layer_backward(backend::Backend& b, const LayerContext& ctx, const LayerSlices& o, backend::ConstView w,
                    backend::View g, const LayerViews& saved, backend::ConstView x_in, Scratch& s);

// The sequences a decoding step runs: each has `rows` new tokens at positions [past, past + rows)
// (one sequence: a prompt's prefill or a token; several: one token each, batched), its layer's
// key and value caches, and the rows of x it owns, consecutively in sequence order.
struct DecodeSequence {
  std::int64_t past = 0;
  std::int64_t rows = 0;
  backend::View k_cache, v_cache;
};

// The layer over the d.t new rows of `sequences`: their keys and values (post-RoPE) are written
// into rows [past, past + rows) of each sequence's caches, each sequence's queries attend to its
// cache rows [0, past + rows), and x [d.t, hidden] is updated in place (residuals). The GEMMs run
// over all d.t rows at once. One sequence: its keys and values go straight into its cache, then
// attention_cached. Several (one row each): the new rows go through a scratch, and one
// Backend::attention_decode_batch writes them into the caches and attends for every sequence.
void layer_decode(backend::Backend& b, const Dims& d, const LayerSlices& o, backend::ConstView w,
                  std::span<const DecodeSequence> sequences, backend::ConstView cos, backend::ConstView sin,
                  backend::View x, DecodeBuffers& s);

}  // namespace odc::model::detail
