#include "odc/kernels/attention_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

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

}  // namespace

template <typename T>
void attention_cached_forward(const CachedAttentionShape& shape, const T* q, const T* k_cache, const T* v_cache,
                              T* out) {
  check_shape(shape);
  if (shape.queries == 0) return;
  const std::int64_t d = shape.head_dim;
  const std::int64_t group = shape.n_heads / shape.n_kv_heads;
  const std::int64_t block = std::clamp(kStackRows / group, kMinBlockRows, kMaxBlockRows);
  const std::int64_t ldq = std::int64_t(shape.n_heads) * d;
  const std::int64_t ldkv = std::int64_t(shape.n_kv_heads) * d;
  const std::int64_t total_keys = shape.past + shape.queries;
  const std::int64_t stack_rows = group * std::min(block, shape.queries);
  const T scale = T(1.0 / std::sqrt(double(d)));

  // Pieces of work write disjoint outputs (their rows, their head group's columns); the longest
  // (latest rows: most keys) first.
  std::vector<Work> items;
  for (std::int64_t r0 = 0; r0 < shape.queries; r0 += block) {
    for (std::int64_t h = 0; h < shape.n_kv_heads; ++h) items.push_back({h, r0, std::min(block, shape.queries - r0)});
  }
  std::reverse(items.begin(), items.end());
  const auto n_items = std::int64_t(items.size());
  const std::int64_t score_elems = stack_rows * total_keys;
  const std::int64_t stack_elems = stack_rows * d;

#pragma omp parallel for schedule(dynamic, 1)
  for (std::int64_t item = 0; item < n_items; ++item) {
    T* scores = scratch<T>(std::size_t(score_elems + 2 * stack_elems + stack_rows));
    T* q_stack = scores + score_elems;
    T* o_stack = q_stack + stack_elems;
    T* inv_sum = o_stack + stack_elems;
    const Work& w = items[std::size_t(item)];
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
}

template void attention_cached_forward<float>(const CachedAttentionShape&, const float*, const float*, const float*,
                                              float*);
template void attention_cached_forward<double>(const CachedAttentionShape&, const double*, const double*,
                                               const double*, double*);

}  // namespace odc::kernels::cpu
