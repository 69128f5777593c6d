#include "odc/model/llama_model.h"

#include <algorithm>
#include <cstring>

#include "odc/core/error.h"
#include "odc/core/tensor.h"
#include "odc/kernels/attention.h"
#include "odc/kernels/cross_entropy.h"
#include "odc/kernels/embedding.h"
#include "odc/kernels/matmul.h"
#include "odc/kernels/rmsnorm.h"
#include "odc/kernels/rope.h"
#include "odc/kernels/swiglu.h"

namespace odc::model {

namespace k = kernels::cpu;

namespace detail {

// Offsets of a decoder layer's tensors inside its unit buffer (the same for every layer).
struct LayerOffsets {
  std::int64_t in_norm, wq, wk, wv, bq = -1, bk = -1, bv = -1, wo, post_norm, wg, wu, wd;
};

LayerOffsets layer_offsets(const UnitLayout& unit, bool bias) {
  auto at = [&](const char* suffix) {
    for (const auto& t : unit.tensors) {
      if (t.name.ends_with(suffix)) return t.offset;
    }
    fail("decoder unit '{}' lacks a tensor ending in '{}'", unit.name, suffix);
  };
  LayerOffsets o{};
  o.in_norm = at("input_layernorm.weight");
  o.wq = at("q_proj.weight");
  o.wk = at("k_proj.weight");
  o.wv = at("v_proj.weight");
  if (bias) {
    o.bq = at("q_proj.bias");
    o.bk = at("k_proj.bias");
    o.bv = at("v_proj.bias");
  }
  o.wo = at("o_proj.weight");
  o.post_norm = at("post_attention_layernorm.weight");
  o.wg = at("gate_proj.weight");
  o.wu = at("up_proj.weight");
  o.wd = at("down_proj.weight");
  return o;
}

const float* opt(const float* base, std::int64_t offset) { return offset < 0 ? nullptr : base + offset; }
float* opt(float* base, std::int64_t offset) { return offset < 0 ? nullptr : base + offset; }

// Rows of logits computed at once by the head: bounds the logits scratch to ~16 MiB.
std::int64_t head_chunk_rows(std::int64_t vocab) {
  return std::clamp<std::int64_t>((std::int64_t{4} << 20) / std::max<std::int64_t>(vocab, 1), 16, 2048);
}


// Saved activations of one decoder layer (what its backward reads).
struct LayerBuffers {
  Workspace xn1, q, k, v, attn, lse, x_mid, rstd1, rstd2, xn2, gate, up;
  std::int64_t bytes() const {
    std::int64_t n = 0;
    for (const Workspace* w : {&xn1, &q, &k, &v, &attn, &lse, &x_mid, &rstd1, &rstd2, &xn2, &gate, &up}) {
      n += w->capacity();
    }
    return n * 4;
  }
};

// Scratch shared by all layers: valid only inside one unit's computation.
struct Scratch {
  Workspace h, dh, dgate, dup, dq, dk, dv, dattn, dxn, dx, cos, sin;
  Workspace xf, rstd_f, dxf, chunk_in, chunk_logits, chunk_dx;
  std::vector<std::int32_t> chunk_targets;
  std::vector<float> chunk_weights, chunk_nll;
  std::vector<std::int64_t> rows;
  std::int64_t bytes() const {
    std::int64_t n = 0;
    for (const Workspace* w : {&h, &dh, &dgate, &dup, &dq, &dk, &dv, &dattn, &dxn, &dx, &cos, &sin, &xf,
                               &rstd_f, &dxf, &chunk_in, &chunk_logits, &chunk_dx}) {
      n += w->capacity();
    }
    return n * 4;
  }
};

struct Dims {
  std::int64_t t, c, q, kv, f, v;
  int heads, kv_heads, head_dim;
  double eps;
};

Dims dims_of(const LlamaConfig& c, std::int64_t tokens) {
  return {tokens, c.hidden_size, c.q_dim(), c.kv_dim(), c.intermediate_size, c.vocab_size,
          c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.rms_norm_eps};
}

void check_batch(const PackedBatch& batch, const LlamaConfig& config) {
  const auto n = batch.tokens.size();
  if (batch.positions.size() != n || batch.targets.size() != n || batch.loss_weights.size() != n) {
    fail("packed batch is inconsistent: {} tokens, {} positions, {} targets, {} weights", n,
         batch.positions.size(), batch.targets.size(), batch.loss_weights.size());
  }
  if (n > 0 && (batch.cu_seqlens.empty() || batch.cu_seqlens.back() != static_cast<std::int32_t>(n))) {
    fail("packed batch cu_seqlens do not cover its {} tokens", n);
  }
  for (std::size_t t = 0; t < n; ++t) {
    if (batch.tokens[t] < 0 || batch.tokens[t] >= config.vocab_size) {
      fail("token id {} at packed position {} is out of range [0, {})", batch.tokens[t], t, config.vocab_size);
    }
  }
  for (std::size_t t = 0; t < n; ++t) {
    if (batch.loss_weights[t] != 0.0f && (batch.targets[t] < 0 || batch.targets[t] >= config.vocab_size)) {
      fail("target id {} at packed position {} is out of range [0, {})", batch.targets[t], t, config.vocab_size);
    }
  }
}

void layer_forward(const Dims& d, const LayerOffsets& o, const float* w, LayerBuffers& b,
                   const float* x_in, float* x_out, const k::AttentionShape& shape, Scratch& s) {
  const std::int64_t t = d.t;
  const float* cos = s.cos.get(t * d.head_dim / 2);
  const float* sin = s.sin.get(t * d.head_dim / 2);
  float* xn1 = b.xn1.get(t * d.c);
  float* q = b.q.get(t * d.q);
  float* kk = b.k.get(t * d.kv);
  float* v = b.v.get(t * d.kv);
  float* attn = b.attn.get(t * d.q);
  float* lse = b.lse.get(t * d.heads);
  float* x_mid = b.x_mid.get(t * d.c);
  float* rstd1 = b.rstd1.get(t);
  float* rstd2 = b.rstd2.get(t);
  float* xn2 = b.xn2.get(t * d.c);
  float* gate = b.gate.get(t * d.f);
  float* up = b.up.get(t * d.f);
  float* h = s.h.get(t * d.f);

  k::rmsnorm_forward<float>(x_in, w + o.in_norm, xn1, rstd1, t, d.c, d.eps);
  k::linear_forward<float>(xn1, w + o.wq, opt(w, o.bq), q, t, d.c, d.q);
  k::linear_forward<float>(xn1, w + o.wk, opt(w, o.bk), kk, t, d.c, d.kv);
  k::linear_forward<float>(xn1, w + o.wv, opt(w, o.bv), v, t, d.c, d.kv);
  k::rope_forward<float>(q, cos, sin, t, d.heads, d.head_dim);
  k::rope_forward<float>(kk, cos, sin, t, d.kv_heads, d.head_dim);
  k::attention_forward<float>(shape, q, kk, v, attn, lse);
  std::memcpy(x_mid, x_in, static_cast<std::size_t>(t * d.c) * sizeof(float));
  k::gemm<float>(false, true, t, d.c, d.q, 1.0f, attn, d.q, w + o.wo, d.q, 1.0f, x_mid, d.c);  // + attn Wo^T
  k::rmsnorm_forward<float>(x_mid, w + o.post_norm, xn2, rstd2, t, d.c, d.eps);
  k::linear_forward<float>(xn2, w + o.wg, nullptr, gate, t, d.c, d.f);
  k::linear_forward<float>(xn2, w + o.wu, nullptr, up, t, d.c, d.f);
  k::swiglu_forward<float>(gate, up, h, t * d.f);
  std::memcpy(x_out, x_mid, static_cast<std::size_t>(t * d.c) * sizeof(float));
  k::gemm<float>(false, true, t, d.c, d.f, 1.0f, h, d.f, w + o.wd, d.f, 1.0f, x_out, d.c);  // + h Wd^T
}

// On entry s.dx holds dL/dx_out; on exit dL/dx_in. Weight gradients are added into g.
void layer_backward(const Dims& d, const LayerOffsets& o, const float* w, float* g, LayerBuffers& b,
                    const float* x_in, const k::AttentionShape& shape, Scratch& s) {
  const std::int64_t t = d.t;
  const float* cos = s.cos.get(t * d.head_dim / 2);
  const float* sin = s.sin.get(t * d.head_dim / 2);
  float* dx = s.dx.get(t * d.c);
  float* h = s.h.get(t * d.f);
  float* dh = s.dh.get(t * d.f);
  float* dgate = s.dgate.get(t * d.f);
  float* dup = s.dup.get(t * d.f);
  float* dxn = s.dxn.get(t * d.c);
  float* dattn = s.dattn.get(t * d.q);
  float* dq = s.dq.get(t * d.q);
  float* dk = s.dk.get(t * d.kv);
  float* dv = s.dv.get(t * d.kv);
  const float* gate = b.gate.get(t * d.f);
  const float* up = b.up.get(t * d.f);

  // MLP: x_out = x_mid + down(silu(gate(xn2)) * up(xn2)); h is recomputed rather than stored.
  k::swiglu_forward<float>(gate, up, h, t * d.f);
  k::linear_backward<float>(dx, h, w + o.wd, dh, g + o.wd, nullptr, t, d.f, d.c, false);
  k::swiglu_backward<float>(dh, gate, up, dgate, dup, t * d.f);
  k::linear_backward<float>(dgate, b.xn2.get(t * d.c), w + o.wg, dxn, g + o.wg, nullptr, t, d.c, d.f, false);
  k::linear_backward<float>(dup, b.xn2.get(t * d.c), w + o.wu, dxn, g + o.wu, nullptr, t, d.c, d.f, true);
  k::rmsnorm_backward<float>(dxn, b.x_mid.get(t * d.c), w + o.post_norm, b.rstd2.get(t), dx, g + o.post_norm, t,
                      d.c, true);  // dx is now dL/dx_mid
  // Attention: x_mid = x_in + o_proj(attn(rope(q), rope(k), v)).
  k::linear_backward<float>(dx, b.attn.get(t * d.q), w + o.wo, dattn, g + o.wo, nullptr, t, d.q, d.c, false);
  k::attention_backward<float>(shape, b.q.get(t * d.q), b.k.get(t * d.kv), b.v.get(t * d.kv), b.attn.get(t * d.q),
                        b.lse.get(t * d.heads), dattn, dq, dk, dv);
  k::rope_backward<float>(dq, cos, sin, t, d.heads, d.head_dim);
  k::rope_backward<float>(dk, cos, sin, t, d.kv_heads, d.head_dim);
  const float* xn1 = b.xn1.get(t * d.c);
  k::linear_backward<float>(dq, xn1, w + o.wq, dxn, g + o.wq, opt(g, o.bq), t, d.c, d.q, false);
  k::linear_backward<float>(dk, xn1, w + o.wk, dxn, g + o.wk, opt(g, o.bk), t, d.c, d.kv, true);
  k::linear_backward<float>(dv, xn1, w + o.wv, dxn, g + o.wv, opt(g, o.bv), t, d.c, d.kv, true);
  k::rmsnorm_backward<float>(dxn, x_in, w + o.in_norm, b.rstd1.get(t), dx, g + o.in_norm, t, d.c, true);
}

}  // namespace detail

struct LlamaModel::Activations {
  std::vector<Workspace> x;  // x[l] = input of layer l; x[L] = input of the head
  std::vector<detail::LayerBuffers> layers;
  detail::LayerOffsets offsets{};
  detail::Scratch scratch;
};

LlamaModel::LlamaModel(const LlamaConfig& config)
    : config_(config), units_(build_unit_layouts(config)), acts_(std::make_unique<Activations>()) {
  config_.validate("model config");
  inv_freq_ = k::rope_inv_freq(config_.head_dim, config_.rope_theta, config_.rope_scaling);
  acts_->x.resize(static_cast<std::size_t>(config_.num_hidden_layers) + 1);
  acts_->layers.resize(static_cast<std::size_t>(config_.num_hidden_layers));
  acts_->offsets = detail::layer_offsets(units_[1], config_.attention_bias);
}

LlamaModel::~LlamaModel() = default;

std::int64_t LlamaModel::activation_bytes() const {
  std::int64_t n = acts_->scratch.bytes();
  for (const auto& w : acts_->x) n += w.capacity() * 4;
  for (const auto& l : acts_->layers) n += l.bytes();
  return n;
}

namespace {

// Units of the forward pass in order, with prefetch hints; returns x[L] ready for the head.
// With tied embeddings unit 0 stays acquired (the head reads it) and `unit0` receives it.
void forward_body(const LlamaConfig& config, const std::vector<double>& inv_freq, const PackedBatch& batch,
                  ParamSource& params, std::vector<Workspace>& x, std::vector<detail::LayerBuffers>& layers,
                  const detail::LayerOffsets& offsets, detail::Scratch& s, const float** unit0,
                  const std::vector<UnitLayout>& units, Tracer* tracer) {
  const auto d = detail::dims_of(config, batch.num_tokens());
  const double tokens = static_cast<double>(d.t);
  const double pairs = tracer != nullptr ? batch.causal_pairs() : 0.0;
  const int num_layers = config.num_hidden_layers;
  const k::AttentionShape shape{batch.cu_seqlens.data(), batch.num_seqs(), d.t, d.heads, d.kv_heads, d.head_dim};

  params.prefetch(1);
  const float* embed = params.acquire(0);
  float* x0 = x[0].get(d.t * d.c);
  if (d.t > 0) {
    const TraceScope trace(tracer, "forward", "forward " + units[0].name, {{"unit", 0}, {"tokens", tokens}, {"pairs", pairs}});
    k::rope_tables<float>(batch.positions.data(), d.t, inv_freq, s.cos.get(d.t * d.head_dim / 2),
                   s.sin.get(d.t * d.head_dim / 2));
    k::embedding_forward<float>(batch.tokens.data(), embed, x0, d.t, d.c);
  }
  if (config.tie_word_embeddings) {
    *unit0 = embed;
  } else {
    params.release(0);
  }
  for (int l = 0; l < num_layers; ++l) {
    const int unit = l + 1;
    params.prefetch(unit + 1);
    const float* w = params.acquire(unit);
    if (d.t > 0) {
      const TraceScope trace(tracer, "forward", "forward " + units[static_cast<std::size_t>(unit)].name,
                             {{"unit", unit}, {"tokens", tokens}, {"pairs", pairs}});
      detail::layer_forward(d, offsets, w, layers[static_cast<std::size_t>(l)], x[static_cast<std::size_t>(l)].get(d.t * d.c),
                            x[static_cast<std::size_t>(l) + 1].get(d.t * d.c), shape, s);
    }
    params.release(unit);
  }
}

}  // namespace

MicrobatchResult LlamaModel::train_microbatch(const PackedBatch& batch, ParamSource& params, GradSink& grads) {
  detail::check_batch(batch, config_);
  auto& a = *acts_;
  auto& s = a.scratch;
  const auto d = detail::dims_of(config_, batch.num_tokens());
  const int num_layers = config_.num_hidden_layers;
  const int head = head_unit();
  const bool tied = config_.tie_word_embeddings;
  const k::AttentionShape shape{batch.cu_seqlens.data(), batch.num_seqs(), d.t, d.heads, d.kv_heads, d.head_dim};

  const float* unit0 = nullptr;
  forward_body(config_, inv_freq_, batch, params, a.x, a.layers, a.offsets, s, &unit0, units_, tracer_);
  const double tokens = static_cast<double>(d.t);
  const double pairs = tracer_ != nullptr ? batch.causal_pairs() : 0.0;

  // Head: final norm, logits in row chunks, weighted cross-entropy and its backward, fused so the
  // [tokens, vocab] logits never exist at once. Only rows with a loss weight need logits.
  MicrobatchResult result;
  const float* wh = params.acquire(head);
  float* gh = grads.grad_buffer(head);
  float* g0 = tied ? grads.grad_buffer(0) : nullptr;
  const auto& head_layout = units_[static_cast<std::size_t>(head)];
  const std::int64_t norm_off = head_layout.find("model.norm.weight").offset;
  const float* table = tied ? unit0 : wh + head_layout.find("lm_head.weight").offset;
  float* gtable = tied ? g0 : gh + head_layout.find("lm_head.weight").offset;
  float* dx = s.dx.get(d.t * d.c);
  if (num_layers > 0) params.prefetch(num_layers);
  if (d.t > 0) {
    const TraceScope trace(tracer_, "head", "head", {{"unit", head}, {"tokens", tokens}, {"pairs", pairs}});
    const float* x_last = a.x[static_cast<std::size_t>(num_layers)].get(d.t * d.c);
    float* xf = s.xf.get(d.t * d.c);
    float* rstd_f = s.rstd_f.get(d.t);
    float* dxf = s.dxf.get(d.t * d.c);
    k::rmsnorm_forward<float>(x_last, wh + norm_off, xf, rstd_f, d.t, d.c, d.eps);
    std::memset(dxf, 0, static_cast<std::size_t>(d.t * d.c) * sizeof(float));
    s.rows.clear();
    for (std::int64_t t = 0; t < d.t; ++t) {
      if (batch.loss_weights[static_cast<std::size_t>(t)] != 0.0f) s.rows.push_back(t);
    }
    const auto n_rows = static_cast<std::int64_t>(s.rows.size());
    const std::int64_t chunk = detail::head_chunk_rows(d.v);
    float* in = s.chunk_in.get(chunk * d.c);
    float* logits = s.chunk_logits.get(chunk * d.v);
    float* dchunk = s.chunk_dx.get(chunk * d.c);
    for (std::int64_t r0 = 0; r0 < n_rows; r0 += chunk) {
      const std::int64_t r = std::min(chunk, n_rows - r0);
      s.chunk_targets.resize(static_cast<std::size_t>(r));
      s.chunk_weights.resize(static_cast<std::size_t>(r));
      s.chunk_nll.resize(static_cast<std::size_t>(r));
      for (std::int64_t i = 0; i < r; ++i) {
        const std::int64_t t = s.rows[static_cast<std::size_t>(r0 + i)];
        std::memcpy(in + i * d.c, xf + t * d.c, static_cast<std::size_t>(d.c) * sizeof(float));
        s.chunk_targets[static_cast<std::size_t>(i)] = batch.targets[static_cast<std::size_t>(t)];
        s.chunk_weights[static_cast<std::size_t>(i)] = batch.loss_weights[static_cast<std::size_t>(t)];
      }
      k::linear_forward<float>(in, table, nullptr, logits, r, d.c, d.v);
      result.weighted_loss += k::cross_entropy_forward_backward<float>(
          logits, s.chunk_targets.data(), s.chunk_weights.data(), r, d.v, logits, s.chunk_nll.data());
      for (std::int64_t i = 0; i < r; ++i) result.nll_sum += s.chunk_nll[static_cast<std::size_t>(i)];
      k::linear_backward<float>(logits, in, table, dchunk, gtable, nullptr, r, d.c, d.v, false);
      for (std::int64_t i = 0; i < r; ++i) {
        const std::int64_t t = s.rows[static_cast<std::size_t>(r0 + i)];
        std::memcpy(dxf + t * d.c, dchunk + i * d.c, static_cast<std::size_t>(d.c) * sizeof(float));
      }
    }
    result.target_tokens = static_cast<double>(n_rows);
    k::rmsnorm_backward<float>(dxf, x_last, wh + norm_off, rstd_f, dx, gh + norm_off, d.t, d.c, false);
  }
  grads.push_grad(head);
  params.release(head);
  if (tied) params.release(0);

  for (int l = num_layers - 1; l >= 0; --l) {
    const int unit = l + 1;
    if (unit > 1) params.prefetch(unit - 1);
    const float* w = params.acquire(unit);
    float* g = grads.grad_buffer(unit);
    if (d.t > 0) {
      const TraceScope trace(tracer_, "backward", "backward " + units_[static_cast<std::size_t>(unit)].name,
                             {{"unit", unit}, {"tokens", tokens}, {"pairs", pairs}});
      detail::layer_backward(d, a.offsets, w, g, a.layers[static_cast<std::size_t>(l)],
                             a.x[static_cast<std::size_t>(l)].get(d.t * d.c), shape, s);
    }
    grads.push_grad(unit);
    params.release(unit);
  }

  // The embedding's backward needs only the token ids, not its weights.
  if (!tied) g0 = grads.grad_buffer(0);
  if (d.t > 0) {
    const TraceScope trace(tracer_, "backward", "backward " + units_[0].name, {{"unit", 0}, {"tokens", tokens}, {"pairs", pairs}});
    k::embedding_backward<float>(batch.tokens.data(), dx, g0, d.t, d.c);
  }
  grads.push_grad(0);
  return result;
}

MicrobatchResult LlamaModel::forward(const PackedBatch& batch, ParamSource& params, std::vector<float>* logits) {
  detail::check_batch(batch, config_);
  auto& a = *acts_;
  auto& s = a.scratch;
  const auto d = detail::dims_of(config_, batch.num_tokens());
  const int head = head_unit();
  const float* unit0 = nullptr;
  forward_body(config_, inv_freq_, batch, params, a.x, a.layers, a.offsets, s, &unit0, units_, nullptr);

  MicrobatchResult result;
  const float* wh = params.acquire(head);
  const auto& head_layout = units_[static_cast<std::size_t>(head)];
  const float* norm_w = wh + head_layout.find("model.norm.weight").offset;
  const float* table = config_.tie_word_embeddings ? unit0 : wh + head_layout.find("lm_head.weight").offset;
  if (d.t > 0) {
    float* xf = s.xf.get(d.t * d.c);
    k::rmsnorm_forward<float>(a.x[static_cast<std::size_t>(config_.num_hidden_layers)].get(d.t * d.c), norm_w, xf,
                       s.rstd_f.get(d.t), d.t, d.c, d.eps);
    const std::int64_t chunk = detail::head_chunk_rows(d.v);
    float* chunk_logits = s.chunk_logits.get(chunk * d.v);
    if (logits != nullptr) logits->assign(static_cast<std::size_t>(d.t * d.v), 0.0f);
    s.chunk_nll.resize(static_cast<std::size_t>(chunk));
    for (std::int64_t r0 = 0; r0 < d.t; r0 += chunk) {
      const std::int64_t r = std::min(chunk, d.t - r0);
      float* out = logits != nullptr ? logits->data() + r0 * d.v : chunk_logits;
      k::linear_forward<float>(xf + r0 * d.c, table, nullptr, out, r, d.c, d.v);
      result.weighted_loss += k::cross_entropy_forward_backward<float>(
          out, batch.targets.data() + r0, batch.loss_weights.data() + r0, r, d.v,
          static_cast<float*>(nullptr), s.chunk_nll.data());
      for (std::int64_t i = 0; i < r; ++i) {
        if (batch.loss_weights[static_cast<std::size_t>(r0 + i)] != 0.0f) {
          result.nll_sum += s.chunk_nll[static_cast<std::size_t>(i)];
          result.target_tokens += 1.0;
        }
      }
    }
  }
  params.release(head);
  if (config_.tie_word_embeddings) params.release(0);
  return result;
}

}  // namespace odc::model
