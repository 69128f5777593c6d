#pragma once
// CUDA attention of new query rows over a key/value cache (built when the CUDA backend is
// enabled): the semantics, layouts and scale of cpu::attention_cached_forward
// (attention_cache.h), in bf16 storage with fp32 scores, softmax and accumulation; the output is
// rounded to bf16 once. All pointers are device memory; bf16 as std::uint16_t bit patterns.
//
// One thread block per (new row, query head): the block's threads compute the row's scores
// against every visible cached key into an fp32 scratch row, reduce the maximum and the sum in a
// fixed order (no atomics: bitwise reproducible run to run), then each thread accumulates some of
// the head's output columns over the keys. Meant for decoding (a few new rows, a cache of up to a
// few thousand positions); any head_dim works.
#include <cstdint>

#include "odc/kernels/cuda_device.h"

namespace odc::kernels::cuda {

struct CudaCachedAttentionShape {
  std::int64_t queries = 0;  // new rows
  std::int64_t past = 0;     // cached rows before them
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
};

// q, out: [queries, n_heads * head_dim]; k_cache, v_cache: [>= past + queries, n_kv_heads * head_dim].
// The fp32 score scratch (queries * n_heads * (past + queries)) comes from `allocator` on `stream`.
void attention_cached_forward(const CudaCachedAttentionShape& shape, const std::uint16_t* q,
                              const std::uint16_t* k_cache, const std::uint16_t* v_cache, std::uint16_t* out,
                              DeviceAllocator& allocator, void* stream);

}  // namespace odc::kernels::cuda
