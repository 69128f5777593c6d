#include "decoder_layer.h"

#include "odc/core/error.h"

namespace odc::model::detail {

using backend::ConstView;
using backend::View;

LayerSlices layer_slices(const UnitLayout& unit, const LlamaConfig& config) {
  auto at = [&](const char* suffix) {
    for (const auto& t : unit.tensors) {
      if (t.name.ends_with(suffix)) return Slice{t.offset, t.numel};
    }
    fail("decoder unit '{}' lacks a tensor ending in '{}'", unit.name, suffix);
  };
  LayerSlices o{};
  o.in_norm = at("input_layernorm.weight");
  o.wq = at("q_proj.weight");
  o.wk = at("k_proj.weight");
  o.wv = at("v_proj.weight");
  if (config.attention_bias) {
    o.bq = at("q_proj.bias");
    o.bk = at("k_proj.bias");
    o.bv = at("v_proj.bias");
  }
  o.wo = at("o_proj.weight");
  if (config.qk_norm) {
    o.q_norm = at("self_attn.q_norm.weight");
    o.k_norm = at("self_attn.k_norm.weight");
  }
  o.post_norm = at("post_attention_layernorm.weight");
  const Slice wg = at("gate_proj.weight");
  const Slice wu = at("up_proj.weight");
  ODC_CHECK(wu.offset == wg.offset + wg.numel && wu.numel == wg.numel,
            "unit '{}': up_proj must follow gate_proj in the unit (one fused GEMM)", unit.name);
  o.wgu = {wg.offset, 2 * wg.numel};
  o.wd = at("down_proj.weight");
  return o;
}

ConstView part(ConstView unit, Slice s) { return s.offset < 0 ? ConstView{} : unit.at(s.offset, s.numel); }
View part(View unit, Slice s) { return s.offset < 0 ? View{} : unit.at(s.offset, s.numel); }

namespace {

bool has_qk_norm(const LayerSlices& o) { return o.q_norm.offset >= 0; }

// Qwen3's q/k norm is an RMSNorm over each head's head_dim values with one weight shared by all
// heads: the backend's row RMSNorm over the [tokens x heads, head_dim] rows (its weight gradient
// sums over all rows, i.e. over tokens and heads, as the shared weight needs).
void head_norm_forward(backend::Backend& b, const Dims& d, ConstView x, ConstView weight, View y, View rstd,
                       std::int64_t rows) {
  b.rmsnorm_forward(x, weight, y, rstd, rows, d.head_dim, d.eps);
}

}  // namespace

Dims dims_of(const LlamaConfig& c, std::int64_t tokens) {
  return {tokens, c.hidden_size, c.q_dim(), c.kv_dim(), c.intermediate_size, c.vocab_size,
          c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.rms_norm_eps};
}

LayerBuffers::LayerBuffers(backend::Backend& b)
    : xn1(b.memory(), b.activation_dtype()),
      q(b.memory(), b.activation_dtype()),
      k(b.memory(), b.activation_dtype()),
      v(b.memory(), b.activation_dtype()),
      attn(b.memory(), b.activation_dtype()),
      lse(b.memory(), DType::f32),
      x_mid(b.memory(), b.activation_dtype()),
      rstd1(b.memory(), DType::f32),
      rstd2(b.memory(), DType::f32),
      xn2(b.memory(), b.activation_dtype()),
      gate_up(b.memory(), b.activation_dtype()),
      q_raw(b.memory(), b.activation_dtype()),
      k_raw(b.memory(), b.activation_dtype()),
      rstd_q(b.memory(), DType::f32),
      rstd_k(b.memory(), DType::f32) {}

std::int64_t LayerBuffers::bytes() const {
  std::int64_t n = 0;
  for (const auto* w : {&xn1, &q, &k, &v, &attn, &lse, &x_mid, &rstd1, &rstd2, &xn2, &gate_up, &q_raw, &k_raw,
                        &rstd_q, &rstd_k}) {
    n += w->capacity_bytes();
  }
  return n;
}

Scratch::Scratch(backend::Backend& b)
    : h(b.memory(), b.activation_dtype()),
      dh(b.memory(), b.activation_dtype()),
      dgate_up(b.memory(), b.activation_dtype()),
      dq(b.memory(), b.activation_dtype()),
      dk(b.memory(), b.activation_dtype()),
      dv(b.memory(), b.activation_dtype()),
      dattn(b.memory(), b.activation_dtype()),
      dxn(b.memory(), b.activation_dtype()),
      dx(b.memory(), b.activation_dtype()),
      cos(b.memory(), DType::f32),
      sin(b.memory(), DType::f32),
      xf(b.memory(), b.activation_dtype()),
      rstd_f(b.memory(), DType::f32),
      dxf(b.memory(), b.activation_dtype()),
      chunk_in(b.memory(), b.activation_dtype()),
      chunk_logits(b.memory(), b.activation_dtype()),
      chunk_dx(b.memory(), b.activation_dtype()),
      chunk_nll(b.memory(), DType::f32),
      tokens(b.memory(), DType::i32),
      positions(b.memory(), DType::i32),
      cu_seqlens(b.memory(), DType::i32),
      targets(b.memory(), DType::i32),
      weights(b.memory(), DType::f32),
      rows(b.memory(), DType::i32),
      chunk_targets(b.memory(), DType::i32),
      chunk_weights(b.memory(), DType::f32),
      policy_old(b.memory(), DType::f32),
      policy_ref(b.memory(), DType::f32),
      policy_advantages(b.memory(), DType::f32),
      chunk_coef(b.memory(), DType::f32),
      chunk_entropy(b.memory(), DType::f32),
      k_keys(b.memory(), b.activation_dtype()),
      v_keys(b.memory(), b.activation_dtype()),
      dk_keys(b.memory(), b.activation_dtype()),
      dv_keys(b.memory(), b.activation_dtype()),
      received(b.memory(), b.activation_dtype()),
      cu_seqlens_k(b.memory(), DType::i32) {}

std::int64_t Scratch::bytes() const {
  std::int64_t n = 0;
  for (const auto* w : {&h, &dh, &dgate_up, &dq, &dk, &dv, &dattn, &dxn, &dx, &cos, &sin, &xf, &rstd_f, &dxf,
                        &chunk_in, &chunk_logits, &chunk_dx, &chunk_nll, &tokens, &positions, &cu_seqlens, &targets,
                        &weights, &rows, &chunk_targets, &chunk_weights, &policy_old, &policy_ref, &policy_advantages,
                        &chunk_coef, &chunk_entropy, &k_keys, &v_keys, &dk_keys, &dv_keys, &received,
                        &cu_seqlens_k}) {
    n += w->capacity_bytes();
  }
  return n;
}

DecodeBuffers::DecodeBuffers(backend::Backend& b)
    : x(b.memory(), b.activation_dtype()),
      xn(b.memory(), b.activation_dtype()),
      rstd(b.memory(), DType::f32),
      q(b.memory(), b.activation_dtype()),
      attn(b.memory(), b.activation_dtype()),
      gate_up(b.memory(), b.activation_dtype()),
      h(b.memory(), b.activation_dtype()),
      cos(b.memory(), DType::f32),
      sin(b.memory(), DType::f32),
      xf(b.memory(), b.activation_dtype()),
      logits(b.memory(), b.activation_dtype()),
      tokens(b.memory(), DType::i32),
      positions(b.memory(), DType::i32),
      q_raw(b.memory(), b.activation_dtype()),
      k_raw(b.memory(), b.activation_dtype()),
      head_rstd(b.memory(), DType::f32),
      k_rows(b.memory(), b.activation_dtype()),
      v_rows(b.memory(), b.activation_dtype()) {}

std::int64_t DecodeBuffers::bytes() const {
  std::int64_t n = 0;
  for (const auto* w : {&x, &xn, &rstd, &q, &attn, &gate_up, &h, &cos, &sin, &xf, &logits, &tokens, &positions,
                        &q_raw, &k_raw, &head_rstd, &k_rows, &v_rows}) {
    n += w->capacity_bytes();
  }
  return n;
}

LayerViews layer_views(LayerBuffers& buffers, const Dims& d, bool qk_norm) {
  LayerViews v = layer_views_except_attention(buffers, d, qk_norm);
  v.attn = buffers.attn.get(d.t * d.q);
  v.lse = buffers.lse.get(d.t * d.heads);
  return v;
}

LayerViews layer_views_except_attention(LayerBuffers& buffers, const Dims& d, bool qk_norm) {
  const std::int64_t t = d.t;
  LayerViews v;
  v.xn1 = buffers.xn1.get(t * d.c);
  v.q = buffers.q.get(t * d.q);
  v.k = buffers.k.get(t * d.kv);
  v.v = buffers.v.get(t * d.kv);
  v.x_mid = buffers.x_mid.get(t * d.c);
  v.rstd1 = buffers.rstd1.get(t);
  v.rstd2 = buffers.rstd2.get(t);
  v.xn2 = buffers.xn2.get(t * d.c);
  v.gate_up = buffers.gate_up.get(t * 2 * d.f);
  if (qk_norm) {
    v.q_raw = buffers.q_raw.get(t * d.q);
    v.k_raw = buffers.k_raw.get(t * d.kv);
    v.rstd_q = buffers.rstd_q.get(t * d.heads);
    v.rstd_k = buffers.rstd_k.get(t * d.kv_heads);
  }
  return v;
}

namespace {

std::int64_t bytes_of(ConstView v) { return v.count * static_cast<std::int64_t>(dtype_size(v.dtype)); }

// A split microbatch's keys and values, every member's rows, gathered into this member's key
// segments.
void gather_keys(const LayerContext& ctx, ConstView k, ConstView v, View k_keys, View v_keys) {
  ctx.exchange->exchange(*ctx.split, ctx.key_gather, k.data, bytes_of(k), k_keys.data, bytes_of(k_keys), ctx.keys_what);
  ctx.exchange->exchange(*ctx.split, ctx.key_gather, v.data, bytes_of(v), v_keys.data, bytes_of(v_keys),
                         ctx.values_what);
}

// The gradient of the key segments' rows back to the members holding them: `local` (this member's
// rows) becomes the sum of every member's copy, added in the pieces' fixed order.
void return_key_grads(backend::Backend& b, const LayerContext& ctx, ConstView keys_grad, View local, Scratch& s,
                      const std::string& what) {
  const std::int64_t width = ctx.d.kv;
  const View received = s.received.get(ctx.key_scatter.received_rows * width);
  ctx.exchange->exchange(*ctx.split, ctx.key_scatter.pieces, keys_grad.data, bytes_of(keys_grad), received.data,
                         bytes_of(received), what);
  b.zero(local);
  for (const RowSum& sum : ctx.key_scatter.sums) {
    b.add(received.at(sum.from_row * width, sum.rows * width), local.at(sum.to_row * width, sum.rows * width));
  }
}

}  // namespace

void layer_forward(backend::Backend& b, const LayerContext& ctx, const LayerSlices& o, ConstView w,
                   const LayerViews& saved, ConstView x_in, View x_out, Scratch& s, ForwardPart stage) {
  const Dims& d = ctx.d;
  const std::int64_t t = d.t;
  const View q = saved.q;
  const View k = saved.k;
  // With the q/k norm the projections land in q_raw/k_raw (saved: the norm's backward reads them)
  // and the normalized heads in q/k.
  const bool qk_norm = has_qk_norm(o);
  const View q_proj = qk_norm ? saved.q_raw : q;
  const View k_proj = qk_norm ? saved.k_raw : k;

  b.rmsnorm_forward(x_in, part(w, o.in_norm), saved.xn1, saved.rstd1, t, d.c, d.eps);
  b.linear_forward(saved.xn1, part(w, o.wq), part(w, o.bq), q_proj, t, d.c, d.q);
  b.linear_forward(saved.xn1, part(w, o.wk), part(w, o.bk), k_proj, t, d.c, d.kv);
  b.linear_forward(saved.xn1, part(w, o.wv), part(w, o.bv), saved.v, t, d.c, d.kv);
  if (qk_norm) {
    head_norm_forward(b, d, q_proj, part(w, o.q_norm), q, saved.rstd_q, t * d.heads);
    head_norm_forward(b, d, k_proj, part(w, o.k_norm), k, saved.rstd_k, t * d.kv_heads);
  }
  b.rope_forward(q, ctx.cos, ctx.sin, t, d.heads, d.head_dim);
  b.rope_forward(k, ctx.cos, ctx.sin, t, d.kv_heads, d.head_dim);
  if (stage != ForwardPart::recompute_except_attention && ctx.split != nullptr) {
    const View k_keys = s.k_keys.get(ctx.key_rows * d.kv);
    const View v_keys = s.v_keys.get(ctx.key_rows * d.kv);
    gather_keys(ctx, k, saved.v, k_keys, v_keys);
    b.attention_forward(ctx.shape, q, k_keys, v_keys, saved.attn, saved.lse);
  } else if (stage != ForwardPart::recompute_except_attention) {
    b.attention_forward(ctx.shape, q, k, saved.v, saved.attn, saved.lse);
  }
  b.linear_forward_residual(saved.attn, part(w, o.wo), x_in, saved.x_mid, t, d.q, d.c);  // x + attn Wo^T
  b.rmsnorm_forward(saved.x_mid, part(w, o.post_norm), saved.xn2, saved.rstd2, t, d.c, d.eps);
  b.linear_forward(saved.xn2, part(w, o.wgu), ConstView{}, saved.gate_up, t, d.c, 2 * d.f);  // gate | up
  if (stage != ForwardPart::all) return;  // the backward recomputes h itself and needs no x_out
  const View h = s.h.get(t * d.f);
  b.swiglu_forward(saved.gate_up, h, t, d.f);
  b.linear_forward_residual(h, part(w, o.wd), saved.x_mid, x_out, t, d.f, d.c);  // x_mid + h Wd^T
}

void layer_decode(backend::Backend& b, const Dims& d, const LayerSlices& o, ConstView w,
                  std::span<const DecodeSequence> sequences, ConstView cos, ConstView sin, View x, DecodeBuffers& s) {
  const std::int64_t t = d.t;
  ODC_CHECK(!sequences.empty(), "layer_decode without sequences");
  const View xn = s.xn.get(t * d.c);
  const View rstd = s.rstd.get(t);
  const View q = s.q.get(t * d.q);
  const View attn = s.attn.get(t * d.q);
  const View gate_up = s.gate_up.get(t * 2 * d.f);
  const View h = s.h.get(t * d.f);
  // One sequence: the new rows' keys and values go straight into their place in its cache.
  const bool one = sequences.size() == 1;
  const View k_new = one ? sequences[0].k_cache.at(sequences[0].past * d.kv, t * d.kv) : s.k_rows.get(t * d.kv);
  const View v_new = one ? sequences[0].v_cache.at(sequences[0].past * d.kv, t * d.kv) : s.v_rows.get(t * d.kv);
  const bool qk_norm = has_qk_norm(o);
  const View q_proj = qk_norm ? s.q_raw.get(t * d.q) : q;
  const View k_proj = qk_norm ? s.k_raw.get(t * d.kv) : k_new;

  // The same ops as layer_forward; the residual adds run in place (x_mid and x_out are x).
  b.rmsnorm_forward(x, part(w, o.in_norm), xn, rstd, t, d.c, d.eps);
  b.linear_forward(xn, part(w, o.wq), part(w, o.bq), q_proj, t, d.c, d.q);
  b.linear_forward(xn, part(w, o.wk), part(w, o.bk), k_proj, t, d.c, d.kv);
  b.linear_forward(xn, part(w, o.wv), part(w, o.bv), v_new, t, d.c, d.kv);
  if (qk_norm) {  // the statistics are not needed: one scratch serves both norms
    head_norm_forward(b, d, q_proj, part(w, o.q_norm), q, s.head_rstd.get(t * d.heads), t * d.heads);
    head_norm_forward(b, d, k_proj, part(w, o.k_norm), k_new, s.head_rstd.get(t * d.kv_heads), t * d.kv_heads);
  }
  b.rope_forward(q, cos, sin, t, d.heads, d.head_dim);
  b.rope_forward(k_new, cos, sin, t, d.kv_heads, d.head_dim);
  if (one) {
    const DecodeSequence& seq = sequences[0];
    ODC_CHECK(seq.rows == t, "layer_decode: the sequence holds {} rows, the step {}", seq.rows, t);
    const std::int64_t keys = seq.past + t;
    b.attention_cached({t, seq.past, d.heads, d.kv_heads, d.head_dim}, q, seq.k_cache.at(0, keys * d.kv),
                       seq.v_cache.at(0, keys * d.kv), attn);
  } else {
    ODC_CHECK(static_cast<std::int64_t>(sequences.size()) == t,
              "layer_decode: {} sequences of one row each in a step of {} rows", sequences.size(), t);
    s.past.clear();
    s.k_caches.clear();
    s.v_caches.clear();
    for (const DecodeSequence& seq : sequences) {
      ODC_CHECK(seq.rows == 1, "layer_decode: a batched sequence has {} new rows, not 1", seq.rows);
      s.past.push_back(seq.past);
      s.k_caches.push_back(seq.k_cache);
      s.v_caches.push_back(seq.v_cache);
    }
    b.attention_decode_batch({s.past, d.heads, d.kv_heads, d.head_dim}, q, k_new, v_new, s.k_caches, s.v_caches, attn);
  }
  b.linear_forward_add(attn, part(w, o.wo), x, t, d.q, d.c);
  b.rmsnorm_forward(x, part(w, o.post_norm), xn, rstd, t, d.c, d.eps);
  b.linear_forward(xn, part(w, o.wgu), ConstView{}, gate_up, t, d.c, 2 * d.f);
  b.swiglu_forward(gate_up, h, t, d.f);
  b.linear_forward_add(h, part(w, o.wd), x, t, d.f, d.c);
}

void layer_backward(backend::Backend& b, const LayerContext& ctx, const LayerSlices& o, ConstView w, View g,
                    const LayerViews& saved, ConstView x_in, Scratch& s) {
  const Dims& d = ctx.d;
  const std::int64_t t = d.t;
  const View dx = s.dx.get(t * d.c);
  const View h = s.h.get(t * d.f);
  const View dh = s.dh.get(t * d.f);
  const View dgate_up = s.dgate_up.get(t * 2 * d.f);
  const View dxn = s.dxn.get(t * d.c);
  const View dattn = s.dattn.get(t * d.q);
  const View dq = s.dq.get(t * d.q);
  const View dk = s.dk.get(t * d.kv);
  const View dv = s.dv.get(t * d.kv);
  const ConstView gate_up = saved.gate_up;
  const ConstView xn2 = saved.xn2;

  // MLP: x_out = x_mid + down(silu(gate(xn2)) * up(xn2)); h is recomputed rather than stored. The
  // gate and up projections are one GEMM each way (gate_up = xn2 [Wg; Wu]^T).
  b.swiglu_forward(gate_up, h, t, d.f);
  b.linear_backward(dx, h, part(w, o.wd), dh, part(g, o.wd), View{}, t, d.f, d.c, false);
  b.swiglu_backward(dh, gate_up, dgate_up, t, d.f);
  b.linear_backward(dgate_up, xn2, part(w, o.wgu), dxn, part(g, o.wgu), View{}, t, d.c, 2 * d.f, false);
  b.rmsnorm_backward(dxn, saved.x_mid, part(w, o.post_norm), saved.rstd2, dx,
                     part(g, o.post_norm), t, d.c, true);  // dx is now dL/dx_mid
  // Attention: x_mid = x_in + o_proj(attn(rope(q), rope(k), v)).
  const ConstView attn = saved.attn;
  b.linear_backward(dx, attn, part(w, o.wo), dattn, part(g, o.wo), View{}, t, d.q, d.c, false);
  if (ctx.split != nullptr) {
    // The keys and values are gathered again rather than kept from the forward: one layer's worth
    // of the whole sequences' keys lives at a time.
    const View k_keys = s.k_keys.get(ctx.key_rows * d.kv);
    const View v_keys = s.v_keys.get(ctx.key_rows * d.kv);
    const View dk_keys = s.dk_keys.get(ctx.key_rows * d.kv);
    const View dv_keys = s.dv_keys.get(ctx.key_rows * d.kv);
    gather_keys(ctx, saved.k, saved.v, k_keys, v_keys);
    b.attention_backward(ctx.shape, saved.q, k_keys, v_keys, attn, saved.lse, dattn, dq, dk_keys, dv_keys);
    return_key_grads(b, ctx, dk_keys, dk, s, ctx.key_grads_what);
    return_key_grads(b, ctx, dv_keys, dv, s, ctx.value_grads_what);
  } else {
    b.attention_backward(ctx.shape, saved.q, saved.k, saved.v, attn, saved.lse, dattn, dq, dk, dv);
  }
  b.rope_backward(dq, ctx.cos, ctx.sin, t, d.heads, d.head_dim);
  b.rope_backward(dk, ctx.cos, ctx.sin, t, d.kv_heads, d.head_dim);
  if (has_qk_norm(o)) {
    // dq/dk hold dL/d(normalized heads); in place (the op allows dx = dy) they become dL/d(projections).
    b.rmsnorm_backward(dq, saved.q_raw, part(w, o.q_norm), saved.rstd_q, dq,
                       part(g, o.q_norm), t * d.heads, d.head_dim, false);
    b.rmsnorm_backward(dk, saved.k_raw, part(w, o.k_norm), saved.rstd_k, dk,
                       part(g, o.k_norm), t * d.kv_heads, d.head_dim, false);
  }
  const ConstView xn1 = saved.xn1;
  b.linear_backward(dq, xn1, part(w, o.wq), dxn, part(g, o.wq), part(g, o.bq), t, d.c, d.q, false);
  b.linear_backward(dk, xn1, part(w, o.wk), dxn, part(g, o.wk), part(g, o.bk), t, d.c, d.kv, true);
  b.linear_backward(dv, xn1, part(w, o.wv), dxn, part(g, o.wv), part(g, o.bv), t, d.c, d.kv, true);
  b.rmsnorm_backward(dxn, x_in, part(w, o.in_norm), saved.rstd1, dx, part(g, o.in_norm), t, d.c, true);
}

}  // namespace odc::model::detail
