#include "odc/backend/op_profiler.h"

#include <type_traits>
#include <utility>

#include <fmt/format.h>

#include "odc/core/error.h"

namespace odc::backend {

namespace {

std::int64_t size_of(ConstView v) { return static_cast<std::int64_t>(dtype_size(v.dtype)); }

bool is_gemm(std::string_view op) { return op.starts_with("linear_"); }

// The causal (query, key <= query) pairs of a packed microbatch, from its host bounds.
double causal_pairs(const AttentionShape& shape) {
  double pairs = 0.0;
  for (std::size_t s = 1; s < shape.host_cu_seqlens.size(); ++s) {
    const double n = shape.host_cu_seqlens[s] - shape.host_cu_seqlens[s - 1];
    pairs += n * (n + 1) / 2.0;
  }
  return pairs;
}

constexpr std::size_t kNone = static_cast<std::size_t>(-1);

// The index of the last op of `before` named `op` (kNone: none).
std::size_t last_of(std::span<const OpRecord> before, std::string_view op) {
  for (std::size_t i = before.size(); i-- > 0;) {
    if (before[i].op == op) return i;
  }
  return kNone;
}

// GEMMs named `op` after index `from` (from = kNone: from the start).
int gemms_after(std::span<const OpRecord> before, std::size_t from, std::string_view op) {
  int n = 0;
  for (std::size_t i = from == kNone ? 0 : from + 1; i < before.size(); ++i) n += before[i].op == op ? 1 : 0;
  return n;
}

const char* qkv(int index) {
  constexpr const char* kRoles[] = {"q", "k", "v"};
  return index >= 0 && index < 3 ? kRoles[index] : "";
}

std::string forward_role(std::span<const OpRecord> before) {
  std::size_t i = before.size();
  while (i > 0 && is_gemm(before[i - 1].op)) --i;  // before[i - 1]: the last op that is no GEMM
  if (i == 0) return "";
  const std::string_view a = before[i - 1].op;
  const int gemms = static_cast<int>(before.size() - i);
  if (a == "gather_rows" || a == "cross_entropy" || a == "upload" || a == "download") return "lm_head";
  if (a == "swiglu_forward") return "down";
  if (a == "attention_forward" || a == "rope_forward" || a == "attention_cached" || a == "attention_decode_batch") {
    return "o_proj";
  }
  if (a == "rmsnorm_forward") {
    // The norm after o_proj feeds gate_up; any other (after the previous layer, the embedding or
    // the backward of the layer above, under recomputation) feeds q, k, v.
    if (i >= 2 && is_gemm(before[i - 2].op) && before[i - 2].role == "o_proj") return "gate_up";
    return qkv(gemms);
  }
  return "";
}

std::string backward_role(std::span<const OpRecord> before) {
  std::size_t i = before.size();
  while (i > 0 && is_gemm(before[i - 1].op)) --i;
  if (i == 0) return "";
  const std::string_view a = before[i - 1].op;
  if (a == "swiglu_forward") return "down";  // h recomputed for down's weight gradient
  if (a == "swiglu_backward") return "gate_up";
  if (a == "cross_entropy" || a == "policy_coefficients" || a == "row_entropy" || a == "scale") return "lm_head";
  // Between the MLP's backward and the attention's: o_proj; after the attention's: q, k, v.
  const std::size_t attention = last_of(before, "attention_backward");
  const std::size_t mlp = last_of(before, "swiglu_backward");
  if (attention != kNone && (mlp == kNone || attention > mlp)) {
    return qkv(gemms_after(before, attention, "linear_backward"));
  }
  return "o_proj";
}

}  // namespace

GemmClassifier llama_gemm_classifier(const LlamaGemmDims& d) {
  const std::pair<const char*, std::pair<std::int64_t, std::int64_t>> shapes[] = {
      {"q", {d.hidden, d.q_dim}},          {"k", {d.hidden, d.kv_dim}},        {"v", {d.hidden, d.kv_dim}},
      {"o_proj", {d.q_dim, d.hidden}},     {"gate_up", {d.hidden, 2 * d.intermediate}},
      {"down", {d.intermediate, d.hidden}}, {"lm_head", {d.hidden, d.vocab}}};
  std::vector<std::pair<std::string, std::pair<std::int64_t, std::int64_t>>> table(std::begin(shapes), std::end(shapes));
  return [table](const GemmCall& call, std::span<const OpRecord> before) -> std::string {
    const std::pair<std::int64_t, std::int64_t> shape{call.in, call.out};
    const std::string role = call.op == "linear_backward" ? backward_role(before) : forward_role(before);
    for (const auto& [name, expected] : table) {
      if (name == role && expected == shape) return role;
    }
    // An order this classifier does not know: the role the shape alone names, if only one does.
    std::string only;
    int matches = 0;
    for (const auto& [name, expected] : table) {
      if (expected == shape && name != "v") {  // k and v share a shape: "k" names either
        only = name;
        ++matches;
      }
    }
    return matches == 1 && only != "k" ? only : fmt::format("gemm {}x{}", call.in, call.out);
  };
}

ProfilingBackend::ProfilingBackend(std::unique_ptr<Backend> inner, GemmClassifier classify)
    : inner_(std::move(inner)), classify_(std::move(classify)) {
  ODC_CHECK(inner_ != nullptr, "ProfilingBackend needs a backend to run on");
}

ProfilingBackend::~ProfilingBackend() = default;

void ProfilingBackend::start() {
  if (timeline_ == nullptr) timeline_ = inner_->make_timeline();
  timeline_->reset();
  pending_.clear();
  history_.clear();
  profile_ = {};
  recording_ = true;
}

OpProfile ProfilingBackend::stop() {
  ODC_CHECK(recording_, "ProfilingBackend::stop without start");
  recording_ = false;
  for (const Pending& p : pending_) profile_.ops[p.category].seconds += timeline_->seconds(p.begin, p.end);
  pending_.clear();
  history_.clear();
  timeline_->reset();
  return std::exchange(profile_, {});
}

template <typename Op>
decltype(auto) ProfilingBackend::timed(std::string_view name, std::string_view role, OpCost cost, Op&& op) {
  if (!recording_) return op();
  const std::size_t begin = timeline_->mark();
  const auto charge = [&] {
    const std::size_t end = timeline_->mark();
    OpCategory& c = profile_.at(name, role);
    ++c.calls;
    c.flops += cost.flops;
    c.bytes += cost.bytes;
    pending_.push_back({static_cast<std::size_t>(&c - profile_.ops.data()), begin, end});
    history_.push_back({name, std::string(role)});
  };
  if constexpr (std::is_void_v<decltype(op())>) {
    op();
    charge();
  } else {
    decltype(auto) result = op();
    charge();
    return result;
  }
}

std::string ProfilingBackend::gemm_role(std::string_view op, std::int64_t rows, std::int64_t in, std::int64_t out) {
  if (!recording_ || !classify_) return "";
  return classify_({op, rows, in, out}, history_);
}

ConstView ProfilingBackend::weights(const float* unit, std::int64_t count) {
  const bool fresh = copies_.acquire(unit, [] { return NoStorage{}; }).second;
  const ConstView w = timed("weights", fresh ? "cast" : "reuse", {}, [&] { return inner_->weights(unit, count); });
  // The copy's bytes (none where the backend computes with the unit itself).
  if (recording_ && fresh && w.data != unit) profile_.at("weights", "cast").bytes += op_cost::weight_cast(count, size_of(w)).bytes;
  return w;
}

void ProfilingBackend::release_weights(const float* unit) {
  copies_.release(unit);
  inner_->release_weights(unit);
}
void ProfilingBackend::keep_weight_copies(bool keep) {
  copies_.set_keep(keep);
  inner_->keep_weight_copies(keep);
}
void ProfilingBackend::weights_changed() {
  copies_.invalidate();
  inner_->weights_changed();
}
void ProfilingBackend::forget_weight_copies() {
  copies_.forget();
  inner_->forget_weight_copies();
}
void ProfilingBackend::set_per_sequence_decode(bool on) {
  Backend::set_per_sequence_decode(on);
  inner_->set_per_sequence_decode(on);
}

ConstView ProfilingBackend::upload(std::span<const std::int32_t> host, Buffer& staging) {
  return timed("upload", "", {}, [&] { return inner_->upload(host, staging); });
}
ConstView ProfilingBackend::upload(std::span<const float> host, Buffer& staging) {
  return timed("upload", "", {}, [&] { return inner_->upload(host, staging); });
}
void ProfilingBackend::download(ConstView source, std::span<float> host) {
  timed("download", "", {}, [&] { inner_->download(source, host); });
}
void ProfilingBackend::copy(ConstView source, View target) {
  timed("copy", "", op_cost::copy(source.count, size_of(source)), [&] { inner_->copy(source, target); });
}
void ProfilingBackend::zero(View target) {
  timed("zero", "", op_cost::zero(target.count, size_of(target)), [&] { inner_->zero(target); });
}
void ProfilingBackend::add(ConstView x, View y) {
  // Reads two operands and writes one: three times the bytes of a zero fill.
  timed("add", "", op_cost::zero(3 * y.count, size_of(y)), [&] { inner_->add(x, y); });
}
void ProfilingBackend::gather_rows(ConstView source, ConstView rows, std::int64_t width, View target) {
  timed("gather_rows", "", op_cost::move_rows(rows.count, width, size_of(source)),
        [&] { inner_->gather_rows(source, rows, width, target); });
}
void ProfilingBackend::scatter_rows(ConstView source, ConstView rows, std::int64_t width, View target) {
  timed("scatter_rows", "", op_cost::move_rows(rows.count, width, size_of(source)),
        [&] { inner_->scatter_rows(source, rows, width, target); });
}

void ProfilingBackend::prepare_microbatch(const AttentionShape& shape) {
  timed("prepare_microbatch", "", {}, [&] { inner_->prepare_microbatch(shape); });
}
void ProfilingBackend::resolve_loss(LossSums& sums) {
  timed("resolve_loss", "", {}, [&] { inner_->resolve_loss(sums); });
}

double ProfilingBackend::sum_of_squares(ConstView x) {
  return timed("sum_of_squares", "", op_cost::sum_of_squares(x.count), [&] { return inner_->sum_of_squares(x); });
}
void ProfilingBackend::adamw_step(std::span<const AdamWSegment> segments, const kernels::AdamWParams& params) {
  std::int64_t elements = 0;
  for (const auto& s : segments) elements += s.param.count;
  timed("adamw_step", "", op_cost::adamw(elements), [&] { inner_->adamw_step(segments, params); });
}

void ProfilingBackend::rmsnorm_forward(ConstView x, ConstView weight, View y, View rstd, std::int64_t rows,
                                       std::int64_t dim, double eps) {
  timed("rmsnorm_forward", "", op_cost::rmsnorm_forward(rows, dim, size_of(x), size_of(weight)),
        [&] { inner_->rmsnorm_forward(x, weight, y, rstd, rows, dim, eps); });
}
void ProfilingBackend::rmsnorm_backward(ConstView dy, ConstView x, ConstView weight, ConstView rstd, View dx,
                                        View dweight, std::int64_t rows, std::int64_t dim, bool dx_accumulate) {
  timed("rmsnorm_backward", "", op_cost::rmsnorm_backward(rows, dim, size_of(dy), size_of(weight), dx_accumulate),
        [&] { inner_->rmsnorm_backward(dy, x, weight, rstd, dx, dweight, rows, dim, dx_accumulate); });
}
void ProfilingBackend::linear_forward(ConstView x, ConstView weight, ConstView bias, View y, std::int64_t rows,
                                      std::int64_t in, std::int64_t out) {
  timed("linear_forward", gemm_role("linear_forward", rows, in, out), op_cost::linear_forward(rows, in, out),
        [&] { inner_->linear_forward(x, weight, bias, y, rows, in, out); });
}
void ProfilingBackend::linear_forward_add(ConstView x, ConstView weight, View y, std::int64_t rows, std::int64_t in,
                                          std::int64_t out) {
  timed("linear_forward_add", gemm_role("linear_forward_add", rows, in, out), op_cost::linear_forward(rows, in, out),
        [&] { inner_->linear_forward_add(x, weight, y, rows, in, out); });
}
void ProfilingBackend::linear_forward_residual(ConstView x, ConstView weight, ConstView residual, View y,
                                               std::int64_t rows, std::int64_t in, std::int64_t out) {
  timed("linear_forward_residual", gemm_role("linear_forward_residual", rows, in, out),
        op_cost::linear_forward(rows, in, out),
        [&] { inner_->linear_forward_residual(x, weight, residual, y, rows, in, out); });
}
void ProfilingBackend::linear_backward(ConstView dy, ConstView x, ConstView weight, View dx, View dweight, View dbias,
                                       std::int64_t rows, std::int64_t in, std::int64_t out, bool dx_accumulate) {
  timed("linear_backward", gemm_role("linear_backward", rows, in, out),
        op_cost::linear_backward(rows, in, out, !dx.empty(), !dweight.empty()),
        [&] { inner_->linear_backward(dy, x, weight, dx, dweight, dbias, rows, in, out, dx_accumulate); });
}
void ProfilingBackend::rope_tables(ConstView positions, std::int64_t tokens, const std::vector<double>& inv_freq,
                                   View cos, View sin) {
  timed("rope_tables", "", op_cost::rope_tables(tokens, 2 * static_cast<std::int64_t>(inv_freq.size())),
        [&] { inner_->rope_tables(positions, tokens, inv_freq, cos, sin); });
}
void ProfilingBackend::rope_forward(View x, ConstView cos, ConstView sin, std::int64_t tokens, int heads,
                                    int head_dim) {
  timed("rope_forward", "", op_cost::rope(tokens, heads, head_dim, size_of(x)),
        [&] { inner_->rope_forward(x, cos, sin, tokens, heads, head_dim); });
}
void ProfilingBackend::rope_backward(View dx, ConstView cos, ConstView sin, std::int64_t tokens, int heads,
                                     int head_dim) {
  timed("rope_backward", "", op_cost::rope(tokens, heads, head_dim, size_of(dx)),
        [&] { inner_->rope_backward(dx, cos, sin, tokens, heads, head_dim); });
}
void ProfilingBackend::attention_forward(const AttentionShape& shape, ConstView q, ConstView k, ConstView v, View out,
                                         View lse) {
  timed("attention_forward", "", op_cost::attention_forward(causal_pairs(shape), shape.n_heads, shape.head_dim),
        [&] { inner_->attention_forward(shape, q, k, v, out, lse); });
}
void ProfilingBackend::attention_backward(const AttentionShape& shape, ConstView q, ConstView k, ConstView v,
                                          ConstView out, ConstView lse, ConstView dout, View dq, View dk, View dv) {
  timed("attention_backward", "", op_cost::attention_backward(causal_pairs(shape), shape.n_heads, shape.head_dim),
        [&] { inner_->attention_backward(shape, q, k, v, out, lse, dout, dq, dk, dv); });
}
void ProfilingBackend::attention_cached(const CachedAttentionShape& shape, ConstView q, ConstView k_cache,
                                        ConstView v_cache, View out) {
  timed("attention_cached", "", op_cost::attention_cached(shape.queries, shape.past, shape.n_heads, shape.head_dim),
        [&] { inner_->attention_cached(shape, q, k_cache, v_cache, out); });
}
void ProfilingBackend::attention_decode_batch(const DecodeAttentionShape& shape, ConstView q, ConstView k_new,
                                              ConstView v_new, std::span<const View> k_caches,
                                              std::span<const View> v_caches, View out) {
  OpCost cost;
  for (const std::int64_t past : shape.past) cost.flops += op_cost::attention_cached(1, past, shape.n_heads, shape.head_dim).flops;
  timed("attention_decode_batch", "", cost,
        [&] { inner_->attention_decode_batch(shape, q, k_new, v_new, k_caches, v_caches, out); });
}
void ProfilingBackend::swiglu_forward(ConstView gate_up, View h, std::int64_t rows, std::int64_t width) {
  timed("swiglu_forward", "", op_cost::swiglu_forward(rows, width, size_of(gate_up)),
        [&] { inner_->swiglu_forward(gate_up, h, rows, width); });
}
void ProfilingBackend::swiglu_backward(ConstView dh, ConstView gate_up, View dgate_up, std::int64_t rows,
                                       std::int64_t width) {
  timed("swiglu_backward", "", op_cost::swiglu_backward(rows, width, size_of(gate_up)),
        [&] { inner_->swiglu_backward(dh, gate_up, dgate_up, rows, width); });
}
void ProfilingBackend::embedding_forward(ConstView ids, ConstView table, View out, std::int64_t tokens,
                                         std::int64_t dim) {
  timed("embedding_forward", "", op_cost::embedding_forward(tokens, dim, size_of(out), size_of(table)),
        [&] { inner_->embedding_forward(ids, table, out, tokens, dim); });
}
void ProfilingBackend::embedding_backward(ConstView ids, ConstView dout, View dtable, std::int64_t tokens,
                                          std::int64_t dim) {
  timed("embedding_backward", "", op_cost::embedding_backward(tokens, dim, size_of(dout)),
        [&] { inner_->embedding_backward(ids, dout, dtable, tokens, dim); });
}
void ProfilingBackend::cross_entropy(ConstView logits, ConstView targets, ConstView weights, std::int64_t rows,
                                     std::int64_t vocab, View dlogits, View nll, LossSums& sums) {
  timed("cross_entropy", "", op_cost::cross_entropy(rows, vocab, size_of(logits), !dlogits.empty()),
        [&] { inner_->cross_entropy(logits, targets, weights, rows, vocab, dlogits, nll, sums); });
}
void ProfilingBackend::scale(View x, double alpha) {
  timed("scale", "", op_cost::scale(x.count, size_of(x)), [&] { inner_->scale(x, alpha); });
}
void ProfilingBackend::row_entropy(ConstView logits, std::int64_t rows, std::int64_t vocab, View out) {
  timed("row_entropy", "", op_cost::row_entropy(rows, vocab, size_of(logits)),
        [&] { inner_->row_entropy(logits, rows, vocab, out); });
}
void ProfilingBackend::policy_coefficients(ConstView nll, ConstView old_logp, ConstView advantages, ConstView ref_logp,
                                           ConstView weights, ConstView entropy, std::int64_t rows,
                                           const kernels::PolicyLossParams& params, View coef,
                                           kernels::PolicyLossSums& sums) {
  timed("policy_coefficients", "", {}, [&] {
    inner_->policy_coefficients(nll, old_logp, advantages, ref_logp, weights, entropy, rows, params, coef, sums);
  });
}
void ProfilingBackend::resolve_policy(kernels::PolicyLossSums& sums) {
  timed("resolve_policy", "", {}, [&] { inner_->resolve_policy(sums); });
}

}  // namespace odc::backend
