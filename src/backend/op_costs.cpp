#include "odc/backend/op_costs.h"

#include <utility>

#include "odc/core/error.h"

namespace odc::backend {

namespace {

constexpr std::pair<std::string_view, OpMeasure> kMeasures[] = {
    {"linear_forward", OpMeasure::flops},
    {"linear_forward_add", OpMeasure::flops},
    {"linear_forward_residual", OpMeasure::flops},
    {"linear_backward", OpMeasure::flops},
    {"attention_forward", OpMeasure::flops},
    {"attention_backward", OpMeasure::flops},
    {"attention_cached", OpMeasure::flops},
    {"attention_decode_batch", OpMeasure::flops},
    {"rmsnorm_forward", OpMeasure::bytes},
    {"rmsnorm_backward", OpMeasure::bytes},
    {"rope_tables", OpMeasure::bytes},
    {"rope_forward", OpMeasure::bytes},
    {"rope_backward", OpMeasure::bytes},
    {"swiglu_forward", OpMeasure::bytes},
    {"swiglu_backward", OpMeasure::bytes},
    {"embedding_forward", OpMeasure::bytes},
    {"embedding_backward", OpMeasure::bytes},
    {"cross_entropy", OpMeasure::bytes},
    {"scale", OpMeasure::bytes},
    {"row_entropy", OpMeasure::bytes},
    {"weights", OpMeasure::bytes},
    {"copy", OpMeasure::bytes},
    {"zero", OpMeasure::bytes},
    {"gather_rows", OpMeasure::bytes},
    {"scatter_rows", OpMeasure::bytes},
    {"adamw_step", OpMeasure::bytes},
    {"sum_of_squares", OpMeasure::bytes},
    {"upload", OpMeasure::calls},
    {"download", OpMeasure::calls},
    {"prepare_microbatch", OpMeasure::calls},
    {"resolve_loss", OpMeasure::calls},
    {"resolve_policy", OpMeasure::calls},
    {"policy_coefficients", OpMeasure::calls},
};

double d(std::int64_t v) { return static_cast<double>(v); }

}  // namespace

OpMeasure measure_of(std::string_view op) {
  for (const auto& [name, measure] : kMeasures) {
    if (name == op) return measure;
  }
  fail("measure_of: '{}' is no backend op", op);
}

std::string_view measure_name(OpMeasure measure) {
  switch (measure) {
    case OpMeasure::flops: return "flops";
    case OpMeasure::bytes: return "bytes";
    case OpMeasure::calls: return "calls";
  }
  return "?";
}

namespace op_cost {

OpCost linear_forward(std::int64_t rows, std::int64_t in, std::int64_t out) { return {2.0 * d(rows) * d(in) * d(out), 0.0}; }

OpCost linear_backward(std::int64_t rows, std::int64_t in, std::int64_t out, bool dx, bool dweight) {
  return {2.0 * d(rows) * d(in) * d(out) * ((dx ? 1.0 : 0.0) + (dweight ? 1.0 : 0.0)), 0.0};
}

OpCost attention_forward(double causal_pairs, std::int64_t heads, std::int64_t head_dim) {
  return {4.0 * causal_pairs * d(heads) * d(head_dim), 0.0};
}

OpCost attention_backward(double causal_pairs, std::int64_t heads, std::int64_t head_dim) {
  return {8.0 * causal_pairs * d(heads) * d(head_dim), 0.0};
}

OpCost attention_cached(std::int64_t queries, std::int64_t past, std::int64_t heads, std::int64_t head_dim) {
  // Query i (0-based) sees past + i + 1 keys.
  const double pairs = d(queries) * d(past) + d(queries) * d(queries + 1) / 2.0;
  return {4.0 * pairs * d(heads) * d(head_dim), 0.0};
}

OpCost rmsnorm_forward(std::int64_t rows, std::int64_t dim, std::int64_t a, std::int64_t w) {
  return {0.0, d(rows) * d(dim) * 2.0 * d(a) + d(dim) * d(w) + d(rows) * 4.0};
}

OpCost rmsnorm_backward(std::int64_t rows, std::int64_t dim, std::int64_t a, std::int64_t w, bool dx_accumulate) {
  const double per_row = (3.0 + (dx_accumulate ? 1.0 : 0.0)) * d(a);  // dy, x, dx (+ dx read)
  return {0.0, d(rows) * d(dim) * per_row + d(dim) * (d(w) + 8.0) + d(rows) * 4.0};
}

OpCost rope(std::int64_t tokens, std::int64_t heads, std::int64_t head_dim, std::int64_t a) {
  return {0.0, d(tokens) * d(heads) * d(head_dim) * 2.0 * d(a) + d(tokens) * d(head_dim) * 4.0};
}

OpCost rope_tables(std::int64_t tokens, std::int64_t head_dim) {
  return {0.0, d(tokens) * 4.0 + d(tokens) * d(head_dim) * 4.0};
}

OpCost swiglu_forward(std::int64_t rows, std::int64_t width, std::int64_t a) {
  return {0.0, d(rows) * d(width) * 3.0 * d(a)};
}

OpCost swiglu_backward(std::int64_t rows, std::int64_t width, std::int64_t a) {
  return {0.0, d(rows) * d(width) * 5.0 * d(a)};  // dh, gate_up (2), dgate_up (2)
}

OpCost embedding_forward(std::int64_t tokens, std::int64_t dim, std::int64_t a, std::int64_t w) {
  return {0.0, d(tokens) * 4.0 + d(tokens) * d(dim) * d(a + w)};
}

OpCost embedding_backward(std::int64_t tokens, std::int64_t dim, std::int64_t a) {
  return {0.0, d(tokens) * 4.0 + d(tokens) * d(dim) * (d(a) + 8.0)};
}

OpCost cross_entropy(std::int64_t rows, std::int64_t vocab, std::int64_t a, bool dlogits) {
  return {0.0, d(rows) * d(vocab) * d(a) * (dlogits ? 2.0 : 1.0) + d(rows) * 12.0};
}

OpCost scale(std::int64_t count, std::int64_t s) { return {0.0, 2.0 * d(count) * d(s)}; }

OpCost row_entropy(std::int64_t rows, std::int64_t vocab, std::int64_t a) {
  return {0.0, d(rows) * d(vocab) * d(a) + d(rows) * 4.0};
}

OpCost weight_cast(std::int64_t count, std::int64_t copy_bytes) {
  return {0.0, copy_bytes > 0 ? d(count) * d(4 + copy_bytes) : 0.0};
}

OpCost copy(std::int64_t count, std::int64_t s) { return {0.0, 2.0 * d(count) * d(s)}; }
OpCost zero(std::int64_t count, std::int64_t s) { return {0.0, d(count) * d(s)}; }

OpCost move_rows(std::int64_t rows, std::int64_t width, std::int64_t s) {
  return {0.0, d(rows) * 4.0 + 2.0 * d(rows) * d(width) * d(s)};
}

OpCost adamw(std::int64_t elements) { return {0.0, d(elements) * 28.0}; }
OpCost sum_of_squares(std::int64_t elements) { return {0.0, d(elements) * 4.0}; }

}  // namespace op_cost

}  // namespace odc::backend
