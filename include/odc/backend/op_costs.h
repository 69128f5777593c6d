#pragma once
// What one call of a Backend op computes and moves, from its sizes alone. The op profiler
// (backend/op_profiler.h) charges every call it times with these numbers, and the step estimate
// (train/plan/step_estimate.h) predicts a step's calls with the same functions: a rate measured per
// category on one shape (FLOP/s, bytes/s) then prices another shape's work by the same rule.
//
// FLOPs are the model's: a GEMM of rows x in x out is 2 * rows * in * out per product; causal
// attention is 4 FLOPs per (query, key <= query) pair and query element forward (scores and P.V)
// and 8 backward, as LlamaConfig::attention_flops_per_pair counts them (not the kernel's
// recomputed scores). Bytes are each operand read or written once at its element size: a lower
// bound on the memory traffic of an element-wise op, the number its bytes/s is quoted against.
#include <cstdint>
#include <string_view>

namespace odc::backend {

// What a category's time grows with, so that its measured rate carries over to another shape:
// the GEMMs and attention by FLOPs, element-wise ops by bytes, and the ops whose cost is a fixed
// latency (host <-> device transfers of index data, the per-microbatch hooks, the loss reads) by
// calls.
enum class OpMeasure : std::uint8_t { flops, bytes, calls };
// The measure of a Backend op by its name (the names ProfilingBackend records: "linear_forward",
// "weights", ...); odc::Error for a name that is no op.
OpMeasure measure_of(std::string_view op);
std::string_view measure_name(OpMeasure measure);  // "flops" | "bytes" | "calls"

struct OpCost {
  double flops = 0.0;
  double bytes = 0.0;
};

// The costs, one function per op family. `a`: bytes of an activation element, `w`: of a weight
// element as the op reads it (the compute copy, or the fp32 unit), `s`: of the op's own elements.
namespace op_cost {

// Ops measured by FLOPs carry no bytes. linear_forward (and _add, _residual): y = x W^T.
OpCost linear_forward(std::int64_t rows, std::int64_t in, std::int64_t out);
// linear_backward: dx (when wanted) and dW (when wanted), each a GEMM of the forward's size.
OpCost linear_backward(std::int64_t rows, std::int64_t in, std::int64_t out, bool dx, bool dweight);
OpCost attention_forward(double causal_pairs, std::int64_t heads, std::int64_t head_dim);
OpCost attention_backward(double causal_pairs, std::int64_t heads, std::int64_t head_dim);
// Decoding: `queries` new rows after `past` cached ones attend to past + 1 .. past + queries keys.
OpCost attention_cached(std::int64_t queries, std::int64_t past, std::int64_t heads, std::int64_t head_dim);

OpCost rmsnorm_forward(std::int64_t rows, std::int64_t dim, std::int64_t a, std::int64_t w);
// dweight is an fp32 accumulator (read and written); dx read too when accumulated into.
OpCost rmsnorm_backward(std::int64_t rows, std::int64_t dim, std::int64_t a, std::int64_t w, bool dx_accumulate);
OpCost rope(std::int64_t tokens, std::int64_t heads, std::int64_t head_dim, std::int64_t a);  // in place
OpCost rope_tables(std::int64_t tokens, std::int64_t head_dim);
OpCost swiglu_forward(std::int64_t rows, std::int64_t width, std::int64_t a);
OpCost swiglu_backward(std::int64_t rows, std::int64_t width, std::int64_t a);
OpCost embedding_forward(std::int64_t tokens, std::int64_t dim, std::int64_t a, std::int64_t w);
OpCost embedding_backward(std::int64_t tokens, std::int64_t dim, std::int64_t a);  // fp32 dtable
// `dlogits`: whether the gradient rows are written (the training head, in place).
OpCost cross_entropy(std::int64_t rows, std::int64_t vocab, std::int64_t a, bool dlogits);
OpCost scale(std::int64_t count, std::int64_t s);
OpCost row_entropy(std::int64_t rows, std::int64_t vocab, std::int64_t a);
// weights(): the fp32 unit read, the compute copy written (`copy_bytes` per element).
OpCost weight_cast(std::int64_t count, std::int64_t copy_bytes);
OpCost copy(std::int64_t count, std::int64_t s);
OpCost zero(std::int64_t count, std::int64_t s);
OpCost move_rows(std::int64_t rows, std::int64_t width, std::int64_t s);  // gather_rows, scatter_rows
// AdamW on fp32 state: parameter, gradient and both moments read, parameter and moments written.
OpCost adamw(std::int64_t elements);
OpCost sum_of_squares(std::int64_t elements);

}  // namespace op_cost

}  // namespace odc::backend
