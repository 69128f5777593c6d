#include "odc/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "odc/core/error.h"
#include "odc/kernels/attention_segments.h"
#include "odc/kernels/matmul.h"
#include "vec_math.h"
#include "vec_rows.h"

// Blocked causal attention in the FlashAttention style, on top of BLAS. Per sequence and kv
// head, query rows are processed in blocks; the block's rows of all query heads sharing that kv
// head are stacked into one matrix, so each GEMM against K or V serves the whole group (taller
// GEMMs, K/V packed once per group instead of once per head). A block multiplies only against
// the keys up to its last row (causal skipping), so scratch is (group * block rows) x seq_len and
// the tokens x tokens matrix never exists. Softmax uses the exact row max (all of a row's keys
// are in the scratch at once); the backward recomputes the probabilities from the saved
// log-sum-exp. With key segments (attention.h) a query segment's keys are its own rows of k/v and
// its row i sees keys [0, i + offset], offset = k_len - q_len: the same loops with the key count
// and the mask shifted by offset (offset 0 without key segments: the same operations as before).

namespace odc::kernels::cpu {
namespace {

// Stacked GEMMs of about 256 rows run measurably closer to the BLAS peak than 64-row ones (K = 64
// makes packing a large share of a GEMM); per-head blocks of at most 64 rows keep
// the causal waste on the diagonal block (about block/seq_len of the work) small.
constexpr std::int64_t kStackRows = 256;
constexpr std::int64_t kMaxBlockRows = 64;
constexpr std::int64_t kMinBlockRows = 16;

void check_shape(const AttentionShape& shape) {
  ODC_CHECK(shape.cu_seqlens != nullptr && shape.num_seqs >= 0, "num_seqs {}", shape.num_seqs);
  ODC_CHECK(shape.n_heads > 0 && shape.n_kv_heads > 0 && shape.n_heads % shape.n_kv_heads == 0,
            "n_heads {} must be a positive multiple of n_kv_heads {}", shape.n_heads,
            shape.n_kv_heads);
  ODC_CHECK(shape.head_dim > 0, "head_dim {}", shape.head_dim);
  ODC_CHECK(shape.cu_seqlens[0] == 0, "cu_seqlens[0] = {}", shape.cu_seqlens[0]);
  for (int s = 0; s < shape.num_seqs; ++s) {
    ODC_CHECK(shape.cu_seqlens[s + 1] >= shape.cu_seqlens[s], "cu_seqlens decreases at {}", s);
  }
  ODC_CHECK(shape.cu_seqlens[shape.num_seqs] == shape.tokens,
            "cu_seqlens ends at {} but tokens = {}", shape.cu_seqlens[shape.num_seqs],
            shape.tokens);
  check_key_segments("attention", shape.cu_seqlens, shape.cu_seqlens_k, shape.num_seqs, shape.tokens,
                     shape.key_tokens);
}

// Rows of k, v, dk, dv.
std::int64_t key_rows(const AttentionShape& shape) {
  return shape.cu_seqlens_k != nullptr ? shape.key_tokens : shape.tokens;
}

// Sizes shared by forward and backward.
struct Plan {
  std::int64_t d = 0;           // head_dim
  std::int64_t group = 0;       // query heads per kv head
  std::int64_t block = 0;       // query rows per head in one block
  std::int64_t ldq = 0;         // row stride of q, out, dout, dq
  std::int64_t ldkv = 0;        // row stride of k, v, dk, dv
  std::int64_t max_keys = 0;    // longest key segment
  std::int64_t stack_rows = 0;  // group * block: rows of the stacked scratch matrices
};

Plan make_plan(const AttentionShape& shape) {
  Plan p;
  p.d = shape.head_dim;
  p.group = shape.n_heads / shape.n_kv_heads;
  p.block = std::clamp(kStackRows / p.group, kMinBlockRows, kMaxBlockRows);
  p.ldq = std::int64_t(shape.n_heads) * p.d;
  p.ldkv = std::int64_t(shape.n_kv_heads) * p.d;
  for (int s = 0; s < shape.num_seqs; ++s) {
    const SegmentBounds b = segment_bounds(shape.cu_seqlens, shape.cu_seqlens_k, s);
    if (b.q_len > 0) p.max_keys = std::max(p.max_keys, b.k_len);
  }
  p.stack_rows = p.group * p.block;
  return p;
}

// Copies rows [row0, row0 + rows) of the group's query heads from src (row stride ld) into dst,
// stacked head-major: row h * rows + i of dst is head first_head + h of token row0 + i.
template <typename T>
void gather_heads(const T* src, std::int64_t ld, std::int64_t row0, std::int64_t rows,
                  std::int64_t first_head, const Plan& p, T* dst) {
  for (std::int64_t h = 0; h < p.group; ++h) {
    for (std::int64_t i = 0; i < rows; ++i) {
      std::memcpy(dst + (h * rows + i) * p.d, src + (row0 + i) * ld + (first_head + h) * p.d,
                  sizeof(T) * p.d);
    }
  }
}

// The independent pieces of work: one (sequence, kv head) pair each. They write disjoint parts of
// every output (rows of the sequence and of its key segment, columns of the head group), so the compute threads take
// them in parallel with no synchronization; each thread's GEMMs then run single-threaded (oneDNN
// runs sequentially inside a parallel region). Longest sequences first, taken one at a time:
// the ragged lengths of a packed microbatch balance over the threads like longest-job-first.
struct Item {
  std::int64_t begin = 0, length = 0, kv_head = 0;  // query rows [begin, begin + length)
  std::int64_t key_begin = 0, offset = 0;           // its keys: k_begin, k_len - q_len
};

std::vector<Item> work_items(const AttentionShape& shape) {
  std::vector<Item> items;
  items.reserve(std::size_t(shape.num_seqs) * std::size_t(shape.n_kv_heads));
  for (int seq = 0; seq < shape.num_seqs; ++seq) {
    const SegmentBounds b = segment_bounds(shape.cu_seqlens, shape.cu_seqlens_k, seq);
    if (b.q_len == 0) continue;  // its keys' dk/dv rows stay zero
    for (std::int64_t kv_head = 0; kv_head < shape.n_kv_heads; ++kv_head) {
      items.push_back({b.q_begin, b.q_len, kv_head, b.k_begin, b.offset()});
    }
  }
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.length > b.length; });
  return items;
}

// Per-thread scratch reused across calls: fresh multi-megabyte vectors per call would cost page
// faults and zero-filling on every layer (measured ~6% of the attention time). Grow-only: it keeps
// the largest size seen, e.g. 16 MiB per thread for the float backward at 8k tokens.
template <typename T>
T* scratch(std::size_t elements) {
  thread_local std::vector<T> buffer;
  if (buffer.size() < elements) buffer.resize(elements);
  return buffer.data();
}

}  // namespace

template <typename T>
void attention_forward(const AttentionShape& shape, const T* q, const T* k, const T* v, T* out,
                       T* lse) {
  check_shape(shape);
  const Plan p = make_plan(shape);
  const T scale = T(1.0 / std::sqrt(double(p.d)));
  // Score rows are packed with stride `keys` (the block's key count) to stay dense in cache.
  const std::int64_t score_elems = p.stack_rows * p.max_keys;
  const std::int64_t stack_elems = p.stack_rows * p.d;
  const std::vector<Item> items = work_items(shape);
  const std::int64_t n_items = std::int64_t(items.size());

#pragma omp parallel for schedule(dynamic, 1)
  for (std::int64_t item = 0; item < n_items; ++item) {
    T* scores = scratch<T>(std::size_t(score_elems + 2 * stack_elems + p.stack_rows));
    T* q_stack = scores + score_elems;
    T* o_stack = q_stack + stack_elems;
    T* inv_sum = o_stack + stack_elems;
    const Item& work = items[std::size_t(item)];
    const std::int64_t begin = work.begin, length = work.length, kv_head = work.kv_head, off = work.offset;
    const std::int64_t first_head = kv_head * p.group;
    const T* kh = k + work.key_begin * p.ldkv + kv_head * p.d;
    const T* vh = v + work.key_begin * p.ldkv + kv_head * p.d;
    for (std::int64_t r0 = 0; r0 < length; r0 += p.block) {
      const std::int64_t rows = std::min(p.block, length - r0);
      const std::int64_t keys = r0 + rows + off;  // keys past the block's last row are all masked
      const std::int64_t m = p.group * rows;
      gather_heads(q, p.ldq, begin + r0, rows, first_head, p, q_stack);
      gemm<T>(false, true, m, keys, p.d, scale, q_stack, p.d, kh, p.ldkv, T(0), scores, keys);
      for (std::int64_t h = 0; h < p.group; ++h) {
        T* lse_h = lse + (first_head + h) * shape.tokens + begin + r0;
        for (std::int64_t i = 0; i < rows; ++i) {
          T* row = scores + (h * rows + i) * keys;
          const std::int64_t valid = r0 + i + 1 + off;
          const T max = vec::max_of(row, valid);
          const T sum = vec::exp_shifted_sum(row, valid, max);
          lse_h[i] = max + T(std::log(double(sum)));
          inv_sum[h * rows + i] = T(1) / sum;
          std::fill(row + valid, row + keys, T(0));
        }
      }
      gemm<T>(false, false, m, p.d, keys, T(1), scores, keys, vh, p.ldkv, T(0), o_stack, p.d);
      // O = (exp(S - max) V) / sum: normalizing the d outputs of a row is cheaper than
      // normalizing its `keys` probabilities.
      for (std::int64_t h = 0; h < p.group; ++h) {
        for (std::int64_t i = 0; i < rows; ++i) {
          const T* src = o_stack + (h * rows + i) * p.d;
          T* dst = out + (begin + r0 + i) * p.ldq + (first_head + h) * p.d;
          const T factor = inv_sum[h * rows + i];
          for (std::int64_t c = 0; c < p.d; ++c) dst[c] = src[c] * factor;
        }
      }
    }
  }
}

// With P = softmax(S), O = P V and D_i = sum_c dO_ic O_ic = sum_j P_ij dP_ij:
//   dV = P^T dO,  dP = dO V^T,  dS = P * (dP - D),  dQ = scale dS K,  dK = scale dS^T Q.
template <typename T>
void attention_backward(const AttentionShape& shape, const T* q, const T* k, const T* v,
                        const T* out, const T* lse, const T* dout, T* dq, T* dk, T* dv) {
  check_shape(shape);
  const Plan p = make_plan(shape);
  const T scale = T(1.0 / std::sqrt(double(p.d)));
  const std::int64_t score_elems = p.stack_rows * p.max_keys;
  const std::int64_t stack_elems = p.stack_rows * p.d;
  // dk and dv accumulate over the query blocks (the group's heads are summed inside each GEMM).
  const std::int64_t kv_elems = key_rows(shape) * p.ldkv;
  std::fill(dk, dk + kv_elems, T(0));
  std::fill(dv, dv + kv_elems, T(0));
  const std::vector<Item> items = work_items(shape);
  const std::int64_t n_items = std::int64_t(items.size());

#pragma omp parallel for schedule(dynamic, 1)
  for (std::int64_t item = 0; item < n_items; ++item) {
    T* probs = scratch<T>(std::size_t(2 * score_elems + 3 * stack_elems + p.stack_rows));
    T* dprobs = probs + score_elems;
    T* q_stack = dprobs + score_elems;
    T* do_stack = q_stack + stack_elems;
    T* dq_stack = do_stack + stack_elems;
    T* row_dot = dq_stack + stack_elems;
    const Item& work = items[std::size_t(item)];
    const std::int64_t begin = work.begin, length = work.length, kv_head = work.kv_head, off = work.offset;
    const std::int64_t first_head = kv_head * p.group;
    const std::int64_t kv_offset = work.key_begin * p.ldkv + kv_head * p.d;
    const T* kh = k + kv_offset;
    const T* vh = v + kv_offset;
    T* dkh = dk + kv_offset;
    T* dvh = dv + kv_offset;
    for (std::int64_t r0 = 0; r0 < length; r0 += p.block) {
      const std::int64_t rows = std::min(p.block, length - r0);
      const std::int64_t keys = r0 + rows + off;
      const std::int64_t m = p.group * rows;
      gather_heads(q, p.ldq, begin + r0, rows, first_head, p, q_stack);
      gather_heads(dout, p.ldq, begin + r0, rows, first_head, p, do_stack);

      // P recomputed from the saved log-sum-exp; masked entries are exact zeros.
      gemm<T>(false, true, m, keys, p.d, scale, q_stack, p.d, kh, p.ldkv, T(0), probs, keys);
      for (std::int64_t h = 0; h < p.group; ++h) {
        const T* lse_h = lse + (first_head + h) * shape.tokens + begin + r0;
        for (std::int64_t i = 0; i < rows; ++i) {
          const std::int64_t r = h * rows + i;
          T* row = probs + r * keys;
          const std::int64_t valid = r0 + i + 1 + off;
          vec::exp_shifted(row, valid, lse_h[i]);
          std::fill(row + valid, row + keys, T(0));
          const T* o_row = out + (begin + r0 + i) * p.ldq + (first_head + h) * p.d;
          const T* do_row = do_stack + r * p.d;
          T dot = 0;
          for (std::int64_t c = 0; c < p.d; ++c) dot += o_row[c] * do_row[c];
          row_dot[r] = dot;
        }
      }

      gemm<T>(true, false, keys, p.d, m, T(1), probs, keys, do_stack, p.d, T(1), dvh, p.ldkv);
      gemm<T>(false, true, m, keys, p.d, T(1), do_stack, p.d, vh, p.ldkv, T(0), dprobs, keys);
      for (std::int64_t r = 0; r < m; ++r) {
        // Masked entries have p == 0, so dS is 0 there as well.
        vec::softmax_grad(probs + r * keys, dprobs + r * keys, keys, row_dot[r]);
      }
      gemm<T>(false, false, m, p.d, keys, scale, dprobs, keys, kh, p.ldkv, T(0), dq_stack, p.d);
      gemm<T>(true, false, keys, p.d, m, scale, dprobs, keys, q_stack, p.d, T(1), dkh, p.ldkv);
      for (std::int64_t h = 0; h < p.group; ++h) {
        for (std::int64_t i = 0; i < rows; ++i) {
          std::memcpy(dq + (begin + r0 + i) * p.ldq + (first_head + h) * p.d,
                      dq_stack + (h * rows + i) * p.d, sizeof(T) * p.d);
        }
      }
    }
  }
}

template void attention_forward<float>(const AttentionShape&, const float*, const float*,
                                       const float*, float*, float*);
template void attention_forward<double>(const AttentionShape&, const double*, const double*,
                                        const double*, double*, double*);
template void attention_backward<float>(const AttentionShape&, const float*, const float*,
                                        const float*, const float*, const float*, const float*,
                                        float*, float*, float*);
template void attention_backward<double>(const AttentionShape&, const double*, const double*,
                                         const double*, const double*, const double*, const double*,
                                         double*, double*, double*);

}  // namespace odc::kernels::cpu
