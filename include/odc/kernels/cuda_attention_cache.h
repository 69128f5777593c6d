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
#include <vector>

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

// Batched decoding (Backend::attention_decode_batch) in ONE launch for every sequence: sequence
// i's new key and value rows (row i of k_new, v_new: [sequences, n_kv_heads * head_dim]) are
// written at row past of its caches, then its query (row i of q) attends to its cache rows
// [0, past] into row i of out ([sequences, n_heads * head_dim]). The caches are separate
// allocations: the launch reads them from a device table of one DecodeBatchEntry per sequence.
// One thread block per (sequence, kv head): it appends that kv head's new row and then attends
// every query head of its group, each exactly as attention_cached_forward's block does for one
// new row, so the output is bitwise that of the per-sequence copies and attention_cached_forward
// calls (deterministic; fp32 scores, softmax and sums, the output rounded to bf16 once).
struct DecodeBatchEntry {
  std::uint16_t* k_cache = nullptr;  // [>= past + 1, n_kv_heads * head_dim], bf16
  std::uint16_t* v_cache = nullptr;
  std::int64_t past = 0;    // cached rows before the new one
  std::int64_t scores = 0;  // where its fp32 scratch starts (decode_batch_scratch)
};

struct CudaDecodeBatchShape {
  std::int64_t sequences = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
};

// On the host, before the table's upload: sets every entry's scores offset (n_heads * (past + 1)
// floats each, in entry order) and returns the floats of scratch the launch needs.
std::int64_t decode_batch_scratch(std::vector<DecodeBatchEntry>& entries, int n_heads);

// `table`: shape.sequences entries in device memory (written by a copy ordered before the launch
// on `stream`); the scratch of `scratch_floats` comes from `allocator` on `stream`.
void attention_decode_batch(const CudaDecodeBatchShape& shape, const DecodeBatchEntry* table,
                            std::int64_t scratch_floats, const std::uint16_t* q, const std::uint16_t* k_new,
                            const std::uint16_t* v_new, std::uint16_t* out, DeviceAllocator& allocator, void* stream);

}  // namespace odc::kernels::cuda
