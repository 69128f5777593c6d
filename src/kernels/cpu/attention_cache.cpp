#include "odc/kernels/attention_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "odc/core/dtype.h"
#include "odc/core/error.h"
#include "odc/kernels/matmul.h"
#include "vec_math.h"
#include "vec_rows.h"

// Attention of new rows over a key/value cache, on top of BLAS like attention.cpp: per kv head
// and block of new rows, the rows of every query head sharing that kv head are stacked into one
// matrix, multiplied against the cached keys up to the block's last position (causal skipping),
// soft-maxed with the exact row maximum and multiplied with the cached values. Decoding one token
// (queries = 1) is then one [group, keys] x [keys, head_dim] product per kv head; a prefill runs
// in blocks, so scratch is (group * block) x keys, never queries x keys per head.

namespace odc::kernels::cpu {
namespace {

constexpr std::int64_t kStackRows = 256;  // rows of the stacked GEMMs (attention.cpp's choice)
constexpr std::int64_t kMaxBlockRows = 64;
constexpr std::int64_t kMinBlockRows = 1;

void check_shape(const CachedAttentionShape& s) {
  ODC_CHECK(s.queries >= 0 && s.past >= 0, "cached attention of {} queries after {} cached rows", s.queries, s.past);
  ODC_CHECK(s.n_heads > 0 && s.n_kv_heads > 0 && s.n_heads % s.n_kv_heads == 0,
            "n_heads {} must be a positive multiple of n_kv_heads {}", s.n_heads, s.n_kv_heads);
  ODC_CHECK(s.head_dim > 0, "head_dim {}", s.head_dim);
}

struct Work {
  std::int64_t kv_head = 0, r0 = 0, rows = 0;
};

template <typename T>
T* scratch(std::size_t elements) {
  thread_local std::vector<T> buffer;  // grow-only per-thread scratch, as in attention.cpp
  if (buffer.size() < elements) buffer.resize(elements);
  return buffer.data();
}

std::int64_t block_rows(const CachedAttentionShape& shape) {
  return std::clamp(kStackRows / (shape.n_heads / shape.n_kv_heads), kMinBlockRows, kMaxBlockRows);
}

// One piece of work: new rows [r0, r0 + rows) of kv head w.kv_head and its group of query heads.
// Its scratch depends only on the shape (the rows of the largest block times every key), so a
// piece computes the same bits whichever call (attention_cached_forward, the batched decode) runs
// it and whichever thread.
template <typename T>
void attend_piece(const CachedAttentionShape& shape, const Work& w, const T* q, const T* k_cache, const T* v_cache,
                  T* out) {
  const std::int64_t d = shape.head_dim;
  const std::int64_t group = shape.n_heads / shape.n_kv_heads;
  const std::int64_t ldq = std::int64_t(shape.n_heads) * d;
  const std::int64_t ldkv = std::int64_t(shape.n_kv_heads) * d;
  const std::int64_t stack_rows = group * std::min(block_rows(shape), shape.queries);
  const std::int64_t score_elems = stack_rows * (shape.past + shape.queries);
  const std::int64_t stack_elems = stack_rows * d;
  const T scale = T(1.0 / std::sqrt(double(d)));
  T* scores = scratch<T>(std::size_t(score_elems + 2 * stack_elems + stack_rows));
  T* q_stack = scores + score_elems;
  T* o_stack = q_stack + stack_elems;
  T* inv_sum = o_stack + stack_elems;
  const std::int64_t first_head = w.kv_head * group;
  const std::int64_t keys = shape.past + w.r0 + w.rows;  // later keys are masked for every row
  const std::int64_t m = group * w.rows;
  const T* kh = k_cache + w.kv_head * d;
  const T* vh = v_cache + w.kv_head * d;
  // Row h * rows + i of the stack: query head first_head + h of new row r0 + i.
  for (std::int64_t h = 0; h < group; ++h) {
    for (std::int64_t i = 0; i < w.rows; ++i) {
      std::memcpy(q_stack + (h * w.rows + i) * d, q + (w.r0 + i) * ldq + (first_head + h) * d, sizeof(T) * d);
    }
  }
  gemm<T>(false, true, m, keys, d, scale, q_stack, d, kh, ldkv, T(0), scores, keys);
  for (std::int64_t h = 0; h < group; ++h) {
    for (std::int64_t i = 0; i < w.rows; ++i) {
      T* row = scores + (h * w.rows + i) * keys;
      const std::int64_t valid = shape.past + w.r0 + i + 1;
      const T max = vec::max_of(row, valid);
      const T sum = vec::exp_shifted_sum(row, valid, max);
      inv_sum[h * w.rows + i] = T(1) / sum;
      std::fill(row + valid, row + keys, T(0));
    }
  }
  gemm<T>(false, false, m, d, keys, T(1), scores, keys, vh, ldkv, T(0), o_stack, d);
  for (std::int64_t h = 0; h < group; ++h) {
    for (std::int64_t i = 0; i < w.rows; ++i) {
      const T* src = o_stack + (h * w.rows + i) * d;
      T* dst = out + (w.r0 + i) * ldq + (first_head + h) * d;
      const T factor = inv_sum[h * w.rows + i];
      for (std::int64_t c = 0; c < d; ++c) dst[c] = src[c] * factor;
    }
  }
}

// x rounded to bf16 (nearest even) and back, in float: the CPU backend's bf16 mode.
template <typename T>
void round_to_bf16(T* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) x[i] = T(bf16_to_f32(f32_to_bf16(float(x[i]))));
}

}  // namespace

template <typename T>
void attention_cached_forward(const CachedAttentionShape& shape, const T* q, const T* k_cache, const T* v_cache,
                              T* out) {
  check_shape(shape);
  if (shape.queries == 0) return;
  const std::int64_t block = block_rows(shape);
  // Pieces of work write disjoint outputs (their rows, their head group's columns); the longest
  // (latest rows: most keys) first.
  std::vector<Work> items;
  for (std::int64_t r0 = 0; r0 < shape.queries; r0 += block) {
    for (std::int64_t h = 0; h < shape.n_kv_heads; ++h) items.push_back({h, r0, std::min(block, shape.queries - r0)});
  }
  std::reverse(items.begin(), items.end());
  const auto n_items = std::int64_t(items.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (std::int64_t item = 0; item < n_items; ++item) {
    attend_piece(shape, items[std::size_t(item)], q, k_cache, v_cache, out);
  }
}

template <typename T>
void attention_decode_batch_forward(const DecodeBatchShape& shape, const T* q, const T* k_new, const T* v_new,
                                    T* const* k_caches, T* const* v_caches, T* out, bool round_bf16) {
  const auto count = std::int64_t(shape.past.size());
  for (std::int64_t i = 0; i < count; ++i) {
    check_shape({1, shape.past[std::size_t(i)], shape.n_heads, shape.n_kv_heads, shape.head_dim});
  }
  const std::int64_t d = shape.head_dim;
  const std::int64_t group = shape.n_heads / shape.n_kv_heads;
  const std::int64_t ldq = std::int64_t(shape.n_heads) * d;
  const std::int64_t ldkv = std::int64_t(shape.n_kv_heads) * d;
  // (sequence, kv head) pieces, the longest caches first (ties in sequence order): a fixed order
  // of independent pieces, each writing its own cache columns and output columns.
  std::vector<std::int64_t> order(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) order[std::size_t(i)] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    return shape.past[std::size_t(a)] > shape.past[std::size_t(b)];
  });
  const std::int64_t n_items = count * shape.n_kv_heads;
#pragma omp parallel for schedule(dynamic, 1)
  for (std::int64_t item = 0; item < n_items; ++item) {
    const std::int64_t i = order[std::size_t(item / shape.n_kv_heads)];
    const std::int64_t h = item % shape.n_kv_heads;
    const std::int64_t past = shape.past[std::size_t(i)];
    const std::int64_t at = past * ldkv + h * d;
    std::memcpy(k_caches[i] + at, k_new + i * ldkv + h * d, sizeof(T) * d);
    std::memcpy(v_caches[i] + at, v_new + i * ldkv + h * d, sizeof(T) * d);
    // attention_cached_forward's piece of kv head h for one new row after `past`.
    attend_piece<T>({1, past, shape.n_heads, shape.n_kv_heads, shape.head_dim}, {h, 0, 1}, q + i * ldq, k_caches[i],
                    v_caches[i], out + i * ldq);
    if (round_bf16) round_to_bf16(out + i * ldq + h * group * d, group * d);
  }
}

template void attention_cached_forward<float>(const CachedAttentionShape&, const float*, const float*, const float*,
                                              float*);
template void attention_cached_forward<double>(const CachedAttentionShape&, const double*, const double*,
                                               const double*, double*);
template void attention_decode_batch_forward<float>(const DecodeBatchShape&, const float*, const float*, const float*,
                                                    float* const*, float* const*, float*, bool);
template void attention_decode_batch_forward<double>(const DecodeBatchShape&, const double*, const double*,
                                                     const double*, double* const*, double* const*, double*, bool);

}  // namespace odc::kernels::cpu
