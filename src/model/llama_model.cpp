#include "odc/model/llama_model.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "decoder_layer.h"
#include "policy_head.h"
#include "odc/core/error.h"
#include "odc/kernels/rope_scaling.h"

namespace odc::model {

using backend::ConstView;
using backend::View;

namespace {

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

}  // namespace

struct LlamaModel::Activations {
  explicit Activations(backend::Backend& b, int layers) : work(b), scratch(b) {
    for (int l = 0; l <= layers; ++l) x.emplace_back(b.memory(), b.activation_dtype());
    for (int l = 0; l < layers; ++l) saved.emplace_back(b);
  }
  std::vector<backend::Buffer> x;  // x[l] = input of layer l; x[L] = input of the head
  std::vector<detail::LayerBuffers> saved;  // per layer: all it keeps (none), its attention (selective)
  detail::LayerBuffers work;                 // the layer computing's recomputed set (selective, full)
  detail::LayerSlices slices{};
  detail::Scratch scratch;
  detail::LayerContext context{};
  ConstView tokens;                   // the microbatch's token ids, on the device
  std::vector<std::int32_t> rows;     // head: positions that carry loss weight
  std::vector<std::int32_t> chunk_targets;
  std::vector<float> chunk_weights;
  std::vector<std::int32_t> key_bounds;  // a split microbatch's (context_split.h)
};

LlamaModel::LlamaModel(const LlamaConfig& config, std::unique_ptr<backend::Backend> backend)
    : LlamaModel(config, std::move(backend), nullptr) {}

LlamaModel::LlamaModel(const LlamaConfig& config, backend::Backend& backend) : LlamaModel(config, nullptr, &backend) {}

LlamaModel::LlamaModel(const LlamaConfig& config, std::unique_ptr<backend::Backend> owned, backend::Backend* borrowed)
    : config_(config),
      owned_backend_(std::move(owned)),
      backend_(owned_backend_ ? owned_backend_.get() : borrowed),
      units_(build_unit_layouts(config)) {
  ODC_CHECK(backend_ != nullptr, "a model needs a backend");
  config_.validate("model config");
  inv_freq_ = kernels::rope_inv_freq(config_.head_dim, config_.rope_theta, config_.rope_scaling);
  acts_ = std::make_unique<Activations>(*backend_, config_.num_hidden_layers);
  acts_->slices = detail::layer_slices(units_[1], config_);
}

LlamaModel::~LlamaModel() = default;

std::int64_t LlamaModel::activation_bytes() const {
  std::int64_t n = acts_->scratch.bytes();
  for (const auto& w : acts_->x) n += w.capacity_bytes();
  for (const auto& l : acts_->saved) n += l.bytes();
  return n + acts_->work.bytes();
}

namespace {

// Where layer `l`'s activations live under `mode`: its own buffers (none), the shared working set
// with its own attention output and log-sum-exp (selective), or the working set alone (full).
detail::LayerViews views_for(Recompute mode, std::vector<detail::LayerBuffers>& saved, detail::LayerBuffers& work,
                             std::size_t l, const detail::Dims& d, bool qk_norm) {
  if (mode == Recompute::none) return detail::layer_views(saved[l], d, qk_norm);
  detail::LayerViews v = detail::layer_views_except_attention(work, d, qk_norm);
  detail::LayerBuffers& attention = mode == Recompute::selective ? saved[l] : work;
  v.attn = attention.attn.get(d.t * d.q);
  v.lse = attention.lse.get(d.t * d.heads);
  return v;
}

}  // namespace

void LlamaModel::begin_split(const PackedBatch& batch) {
  const ContextSplit& split = batch.context;
  if (exchange_ == nullptr) fail("a split microbatch (context parallelism) but the model has no context exchange");
  if (split.local_rows() != batch.num_tokens() || batch.num_seqs() != 2 * static_cast<int>(split.lengths.size())) {
    fail("split microbatch {}: {} tokens in {} segments, but its {} sequences give member {} of {} ranks {} rows in {} "
         "chunks", split.tag, batch.num_tokens(), batch.num_seqs(), split.lengths.size(), split.member, split.k(),
         split.local_rows(), 2 * split.lengths.size());
  }
  auto& a = *acts_;
  backend::Backend& b = *backend_;
  const auto row_bytes = a.context.d.kv * static_cast<std::int64_t>(dtype_size(b.activation_dtype()));
  a.key_bounds = key_bounds(split);
  a.context.split = &split;
  a.context.exchange = exchange_;
  a.context.key_gather = key_gather_pieces(split, row_bytes);
  a.context.key_scatter = key_scatter(split, row_bytes);
  a.context.key_rows = a.key_bounds.back();
  const std::string group = fmt::format("split microbatch {} (context parallelism over ranks {})", split.tag,
                                        fmt::join(split.ranks, ","));
  a.context.keys_what = "the keys of " + group;
  a.context.values_what = "the values of " + group;
  a.context.key_grads_what = "the key gradients of " + group;
  a.context.value_grads_what = "the value gradients of " + group;
  a.context.shape.cu_seqlens_k = b.upload(std::span<const std::int32_t>(a.key_bounds), a.scratch.cu_seqlens_k);
  a.context.shape.host_cu_seqlens_k = a.key_bounds;
  a.context.shape.key_tokens = a.context.key_rows;
}

void LlamaModel::begin_microbatch(const PackedBatch& batch) {
  check_batch(batch, config_);
  auto& a = *acts_;
  auto& s = a.scratch;
  backend::Backend& b = *backend_;
  const auto d = detail::dims_of(config_, batch.num_tokens());
  a.context.d = d;
  a.tokens = b.upload(std::span<const std::int32_t>(batch.tokens), s.tokens);
  a.context.shape = backend::AttentionShape{};
  a.context.shape.cu_seqlens = b.upload(std::span<const std::int32_t>(batch.cu_seqlens), s.cu_seqlens);
  a.context.shape.host_cu_seqlens = batch.cu_seqlens;
  a.context.shape.num_seqs = batch.num_seqs();
  a.context.shape.tokens = d.t;
  a.context.shape.n_heads = d.heads;
  a.context.shape.n_kv_heads = d.kv_heads;
  a.context.shape.head_dim = d.head_dim;
  a.context.split = nullptr;
  if (batch.context.active()) begin_split(batch);
  b.prepare_microbatch(a.context.shape);
  const View cos = s.cos.get(d.t * d.head_dim / 2);
  const View sin = s.sin.get(d.t * d.head_dim / 2);
  if (d.t > 0) {
    b.rope_tables(b.upload(std::span<const std::int32_t>(batch.positions), s.positions), d.t, inv_freq_, cos, sin);
  }
  a.context.cos = cos;
  a.context.sin = sin;
}

namespace {

// Units of the forward pass in order, with prefetch hints; leaves x[L] ready for the head.
// With tied embeddings unit 0 stays acquired (the head reads it) and `unit0` receives it.
void forward_body(backend::Backend& b, const LlamaConfig& config, const PackedBatch& batch, ParamSource& params,
                  std::vector<backend::Buffer>& x, std::vector<detail::LayerBuffers>& saved, detail::LayerBuffers& work,
                  Recompute mode, const detail::LayerSlices& slices, detail::Scratch& s, const detail::LayerContext& ctx,
                  ConstView tokens, const float** unit0, const std::vector<UnitLayout>& units, Tracer* tracer) {
  const auto& d = ctx.d;
  const double token_count = static_cast<double>(d.t);
  const double pairs = tracer != nullptr ? batch.causal_pairs() : 0.0;
  const int num_layers = config.num_hidden_layers;

  params.prefetch(1);
  const float* embed = params.acquire(0);
  const View x0 = x[0].get(d.t * d.c);
  if (d.t > 0) {
    const TraceScope trace(tracer, "forward", "forward " + units[0].name, {{"unit", 0}, {"tokens", token_count}, {"pairs", pairs}});
    b.embedding_forward(tokens, b.weights(embed, units[0].numel), x0, d.t, d.c);
  }
  if (config.tie_word_embeddings) {
    *unit0 = embed;
  } else {
    b.release_weights(embed);
    params.release(0);
  }
  for (int l = 0; l < num_layers; ++l) {
    const int unit = l + 1;
    const auto u = static_cast<std::size_t>(unit);
    params.prefetch(unit + 1);
    const float* w = params.acquire(unit);
    if (d.t > 0) {
      const TraceScope trace(tracer, "forward", "forward " + units[u].name,
                             {{"unit", unit}, {"tokens", token_count}, {"pairs", pairs}});
      detail::layer_forward(b, ctx, slices, b.weights(w, units[u].numel),
                            views_for(mode, saved, work, u - 1, d, config.qk_norm), x[u - 1].get(d.t * d.c),
                            x[u].get(d.t * d.c), s);
    }
    b.release_weights(w);
    params.release(unit);
  }
}

}  // namespace

MicrobatchResult LlamaModel::train_microbatch(const PackedBatch& batch, ParamSource& params, GradSink& grads) {
  begin_microbatch(batch);
  auto& a = *acts_;
  auto& s = a.scratch;
  backend::Backend& b = *backend_;
  const auto& d = a.context.d;
  const int num_layers = config_.num_hidden_layers;
  const int head = head_unit();
  const bool tied = config_.tie_word_embeddings;

  const float* unit0 = nullptr;
  forward_body(b, config_, batch, params, a.x, a.saved, a.work, recompute_, a.slices, s, a.context, a.tokens, &unit0,
               units_, tracer_);
  const double tokens = static_cast<double>(d.t);
  const double pairs = tracer_ != nullptr ? batch.causal_pairs() : 0.0;

  // Head: final norm, logits in row chunks, weighted cross-entropy and its backward, fused so the
  // [tokens, vocab] logits never exist at once. Only rows with a loss weight need logits.
  MicrobatchResult result;
  const auto& head_layout = units_[static_cast<std::size_t>(head)];
  const float* head_weights = params.acquire(head);
  const ConstView wh = b.weights(head_weights, head_layout.numel);
  const View gh = b.gradients(grads.grad_buffer(head), head_layout.numel);
  const View g0 = tied ? b.gradients(grads.grad_buffer(0), units_[0].numel) : View{};
  const auto& norm = head_layout.find("model.norm.weight");
  const detail::Slice norm_slice{norm.offset, norm.numel};
  const detail::Slice table_slice = tied ? detail::Slice{0, units_[0].numel}
                                         : detail::Slice{head_layout.find("lm_head.weight").offset,
                                                         head_layout.find("lm_head.weight").numel};
  const ConstView table = detail::part(tied ? b.weights(unit0, units_[0].numel) : wh, table_slice);
  const View gtable = detail::part(tied ? g0 : gh, table_slice);
  const View dx = s.dx.get(d.t * d.c);
  if (num_layers > 0) params.prefetch(num_layers);
  if (d.t > 0) {
    const TraceScope trace(tracer_, "head", "head", {{"unit", head}, {"tokens", tokens}, {"pairs", pairs}});
    const ConstView x_last = a.x[static_cast<std::size_t>(num_layers)].get(d.t * d.c);
    const View xf = s.xf.get(d.t * d.c);
    const View rstd_f = s.rstd_f.get(d.t);
    const View dxf = s.dxf.get(d.t * d.c);
    b.rmsnorm_forward(x_last, detail::part(wh, norm_slice), xf, rstd_f, d.t, d.c, d.eps);
    b.zero(dxf);
    a.rows.clear();
    for (std::int64_t t = 0; t < d.t; ++t) {
      if (batch.loss_weights[static_cast<std::size_t>(t)] != 0.0f) a.rows.push_back(static_cast<std::int32_t>(t));
    }
    const auto n_rows = static_cast<std::int64_t>(a.rows.size());
    const std::int64_t chunk = b.head_chunk_rows(d.v);
    const View in = s.chunk_in.get(chunk * d.c);
    const View logits = s.chunk_logits.get(chunk * d.v);
    const View dchunk = s.chunk_dx.get(chunk * d.c);
    const View nll = s.chunk_nll.get(chunk);
    backend::LossSums sums;
    // The target rows' indices, targets and weights: uploaded once per microbatch (three copies,
    // not three per chunk), each chunk reading its slice.
    a.chunk_targets.resize(static_cast<std::size_t>(n_rows));
    a.chunk_weights.resize(static_cast<std::size_t>(n_rows));
    for (std::int64_t i = 0; i < n_rows; ++i) {
      const auto t = static_cast<std::size_t>(a.rows[static_cast<std::size_t>(i)]);
      a.chunk_targets[static_cast<std::size_t>(i)] = batch.targets[t];
      a.chunk_weights[static_cast<std::size_t>(i)] = batch.loss_weights[t];
    }
    const ConstView all_rows = b.upload(std::span<const std::int32_t>(a.rows), s.rows);
    const ConstView all_targets = b.upload(std::span<const std::int32_t>(a.chunk_targets), s.chunk_targets);
    const ConstView all_weights = b.upload(std::span<const float>(a.chunk_weights), s.chunk_weights);
    std::optional<detail::PolicyHead> policy;
    if (policy_) policy.emplace(b, batch, a.rows, *policy_, policy_entropy_, s);
    for (std::int64_t r0 = 0; r0 < n_rows; r0 += chunk) {
      const std::int64_t r = std::min(chunk, n_rows - r0);
      const ConstView rows = all_rows.at(r0, r);
      b.gather_rows(xf, rows, d.c, in.at(0, r * d.c));
      b.linear_forward(in.at(0, r * d.c), table, ConstView{}, logits.at(0, r * d.v), r, d.c, d.v);
      if (policy) {
        policy->chunk(logits.at(0, r * d.v), all_targets.at(r0, r), all_weights.at(r0, r), nll.at(0, r), r0, r, d.v);
      } else {
        b.cross_entropy(logits.at(0, r * d.v), all_targets.at(r0, r), all_weights.at(r0, r), r, d.v,
                        logits.at(0, r * d.v), nll.at(0, r), sums);
      }
      b.linear_backward(logits.at(0, r * d.v), in.at(0, r * d.c), table, dchunk.at(0, r * d.c), gtable, View{}, r,
                        d.c, d.v, false);
      b.scatter_rows(dchunk.at(0, r * d.c), rows, d.c, dxf);
    }
    b.resolve_loss(sums);
    result.weighted_loss = sums.weighted;
    result.nll_sum = sums.nll;
    if (policy) {
      result.policy = policy->finish();
      result.weighted_loss = result.policy.loss;
      result.nll_sum = result.policy.nll;
    }
    result.target_tokens = static_cast<double>(n_rows);
    b.rmsnorm_backward(dxf, x_last, detail::part(wh, norm_slice), rstd_f, dx, detail::part(gh, norm_slice), d.t, d.c,
                       false);
  }
  grads.push_grad(head);
  b.release_weights(head_weights);
  params.release(head);
  if (tied) {
    b.release_weights(unit0);
    params.release(0);
  }

  for (int l = num_layers - 1; l >= 0; --l) {
    const int unit = l + 1;
    const auto u = static_cast<std::size_t>(unit);
    if (unit > 1) params.prefetch(unit - 1);
    const float* unit_weights = params.acquire(unit);
    const ConstView w = b.weights(unit_weights, units_[u].numel);
    const View g = b.gradients(grads.grad_buffer(unit), units_[u].numel);
    if (d.t > 0) {
      const TraceScope trace(tracer_, "backward", "backward " + units_[u].name,
                             {{"unit", unit}, {"tokens", tokens}, {"pairs", pairs}});
      const detail::LayerViews views = views_for(recompute_, a.saved, a.work, u - 1, d, config_.qk_norm);
      const ConstView x_in = a.x[u - 1].get(d.t * d.c);
      if (recompute_ != Recompute::none) {
        detail::layer_forward(b, a.context, a.slices, w, views, x_in, View{}, s,
                              recompute_ == Recompute::full ? detail::ForwardPart::recompute
                                                            : detail::ForwardPart::recompute_except_attention);
      }
      detail::layer_backward(b, a.context, a.slices, w, g, views, x_in, s);
    }
    grads.push_grad(unit);
    b.release_weights(unit_weights);
    params.release(unit);
  }

  // The embedding's backward needs only the token ids, not its weights.
  const View g_embed = tied ? g0 : b.gradients(grads.grad_buffer(0), units_[0].numel);
  if (d.t > 0) {
    const TraceScope trace(tracer_, "backward", "backward " + units_[0].name, {{"unit", 0}, {"tokens", tokens}, {"pairs", pairs}});
    b.embedding_backward(a.tokens, dx, g_embed, d.t, d.c);
  }
  grads.push_grad(0);
  return result;
}

MicrobatchResult LlamaModel::forward(const PackedBatch& batch, ParamSource& params, std::vector<float>* logits) {
  begin_microbatch(batch);
  auto& a = *acts_;
  auto& s = a.scratch;
  backend::Backend& b = *backend_;
  const auto& d = a.context.d;
  const int head = head_unit();
  const float* unit0 = nullptr;
  forward_body(b, config_, batch, params, a.x, a.saved, a.work, recompute_, a.slices, s, a.context, a.tokens, &unit0,
               units_, nullptr);

  MicrobatchResult result;
  const auto& head_layout = units_[static_cast<std::size_t>(head)];
  const float* head_weights = params.acquire(head);
  const ConstView wh = b.weights(head_weights, head_layout.numel);
  const auto& norm = head_layout.find("model.norm.weight");
  const ConstView norm_w = detail::part(wh, {norm.offset, norm.numel});
  const ConstView table = config_.tie_word_embeddings
                              ? b.weights(unit0, units_[0].numel)
                              : detail::part(wh, {head_layout.find("lm_head.weight").offset,
                                                  head_layout.find("lm_head.weight").numel});
  if (d.t > 0) {
    const View xf = s.xf.get(d.t * d.c);
    b.rmsnorm_forward(a.x[static_cast<std::size_t>(config_.num_hidden_layers)].get(d.t * d.c), norm_w, xf,
                      s.rstd_f.get(d.t), d.t, d.c, d.eps);
    const std::int64_t chunk = b.head_chunk_rows(d.v);
    const View chunk_logits = s.chunk_logits.get(chunk * d.v);
    const View nll = s.chunk_nll.get(chunk);
    if (logits != nullptr) logits->assign(static_cast<std::size_t>(d.t * d.v), 0.0f);
    const ConstView targets = b.upload(std::span<const std::int32_t>(batch.targets), s.targets);
    const ConstView weights = b.upload(std::span<const float>(batch.loss_weights), s.weights);
    backend::LossSums sums;
    for (std::int64_t r0 = 0; r0 < d.t; r0 += chunk) {
      const std::int64_t r = std::min(chunk, d.t - r0);
      const View out = chunk_logits.at(0, r * d.v);
      b.linear_forward(xf.at(r0 * d.c, r * d.c), table, ConstView{}, out, r, d.c, d.v);
      b.cross_entropy(out, targets.at(r0, r), weights.at(r0, r), r, d.v, View{}, nll.at(0, r), sums);
      if (logits != nullptr) {
        b.download(out, std::span<float>(*logits).subspan(static_cast<std::size_t>(r0 * d.v), static_cast<std::size_t>(r * d.v)));
      }
    }
    b.resolve_loss(sums);
    result.weighted_loss = sums.weighted;
    result.nll_sum = sums.nll;
    for (std::int64_t t = 0; t < d.t; ++t) {
      if (batch.loss_weights[static_cast<std::size_t>(t)] != 0.0f) result.target_tokens += 1.0;
    }
  }
  b.release_weights(head_weights);
  params.release(head);
  if (config_.tie_word_embeddings) {
    b.release_weights(unit0);
    params.release(0);
  }
  return result;
}

}  // namespace odc::model
