// Attention of new rows over a key/value cache, and batched decoding (cuda_attention_cache.h).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <cmath>

#include "odc/core/error.h"
#include "odc/kernels/cuda_attention_cache.h"
#include "odc/kernels/cuda_device.h"

namespace odc::kernels::cuda {
namespace {

constexpr int kThreads = 128;
// Query heads per kv head the batched decode serves: its inverse sums (32 KiB at most) and the
// reduction's 512 bytes fit the 48 KiB of shared memory a launch gets without opting in.
constexpr int kMaxDecodeGroup = 8 * 1024;

// The block's maximum (is_max) or sum of one value per thread: a fixed tree in shared memory.
__device__ float block_reduce(float v, bool is_max) {
  __shared__ float part[kThreads];
  part[threadIdx.x] = v;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (static_cast<int>(threadIdx.x) < stride) {
      const float other = part[threadIdx.x + stride];
      part[threadIdx.x] = is_max ? fmaxf(part[threadIdx.x], other) : part[threadIdx.x] + other;
    }
    __syncthreads();
  }
  const float result = part[0];
  __syncthreads();  // every thread has read part[0] before the next call overwrites it
  return result;
}

// Block b: new row b / n_heads, query head b % n_heads, over cache rows [0, past + row].
__global__ void attention_cached_kernel(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                        __nv_bfloat16* out, float* scores, std::int64_t past, std::int64_t keys,
                                        int n_heads, int group, int head_dim, float scale) {
  const std::int64_t row = blockIdx.x / n_heads;
  const int head = static_cast<int>(blockIdx.x % n_heads);
  const std::int64_t ldq = static_cast<std::int64_t>(n_heads) * head_dim;
  const std::int64_t ldkv = static_cast<std::int64_t>(n_heads / group) * head_dim;
  const std::int64_t kv_offset = static_cast<std::int64_t>(head / group) * head_dim;
  const std::int64_t valid = past + row + 1;
  const __nv_bfloat16* q_row = q + row * ldq + static_cast<std::int64_t>(head) * head_dim;
  float* s = scores + static_cast<std::int64_t>(blockIdx.x) * keys;

  float local_max = -FLT_MAX;
  for (std::int64_t j = threadIdx.x; j < valid; j += kThreads) {
    const __nv_bfloat16* k_row = k + j * ldkv + kv_offset;
    float dot = 0.0f;
    for (int c = 0; c < head_dim; ++c) dot += __bfloat162float(q_row[c]) * __bfloat162float(k_row[c]);
    s[j] = dot * scale;
    local_max = fmaxf(local_max, s[j]);
  }
  const float row_max = block_reduce(local_max, true);
  float local_sum = 0.0f;
  for (std::int64_t j = threadIdx.x; j < valid; j += kThreads) {
    s[j] = expf(s[j] - row_max);
    local_sum += s[j];
  }
  // The reduction's barriers also make every thread's probabilities visible to the whole block.
  const float inv_sum = 1.0f / block_reduce(local_sum, false);
  __nv_bfloat16* o_row = out + row * ldq + static_cast<std::int64_t>(head) * head_dim;
  for (int c = static_cast<int>(threadIdx.x); c < head_dim; c += kThreads) {
    float acc = 0.0f;
    for (std::int64_t j = 0; j < valid; ++j) acc += s[j] * __bfloat162float(v[j * ldkv + kv_offset + c]);
    o_row[c] = __float2bfloat16_rn(acc * inv_sum);
  }
}

// Block b: sequence b / n_kv_heads, kv head b % n_kv_heads and its group of query heads. The block
// first writes the sequence's new key and value row of that kv head into its caches (at row past;
// no other block touches those columns), then, for each head of the group, does exactly what
// attention_cached_kernel's block of that head does for one new row after `past` (the same
// per-thread keys, the same reduction tree, the same per-column sums over the keys in order): the
// output is bitwise the per-sequence kernel's. The group's heads share the loads of the kv head's
// keys and values (from L1), and the output columns of all of them are spread over the threads.
__global__ void attention_decode_batch_kernel(const DecodeBatchEntry* table, const __nv_bfloat16* q,
                                              const __nv_bfloat16* k_new, const __nv_bfloat16* v_new,
                                              __nv_bfloat16* out, float* scores, int n_kv_heads, int group,
                                              int head_dim, float scale) {
  extern __shared__ float inv_sums[];  // per head of the group
  const std::int64_t seq = blockIdx.x / n_kv_heads;
  const int kv_head = static_cast<int>(blockIdx.x % n_kv_heads);
  const DecodeBatchEntry e = table[seq];
  const std::int64_t ldq = static_cast<std::int64_t>(n_kv_heads) * group * head_dim;
  const std::int64_t ldkv = static_cast<std::int64_t>(n_kv_heads) * head_dim;
  const std::int64_t kv_offset = static_cast<std::int64_t>(kv_head) * head_dim;
  const std::int64_t valid = e.past + 1;
  auto* k = reinterpret_cast<__nv_bfloat16*>(e.k_cache);
  auto* v = reinterpret_cast<__nv_bfloat16*>(e.v_cache);
  for (int c = static_cast<int>(threadIdx.x); c < head_dim; c += kThreads) {
    k[e.past * ldkv + kv_offset + c] = k_new[seq * ldkv + kv_offset + c];
    v[e.past * ldkv + kv_offset + c] = v_new[seq * ldkv + kv_offset + c];
  }
  __syncthreads();  // the new row is visible to every thread of the block
  const __nv_bfloat16* q_group = q + seq * ldq + kv_offset * group;  // the group's heads, adjacent
  float* s = scores + e.scores + static_cast<std::int64_t>(kv_head) * group * valid;  // head h: s + h * valid

  for (std::int64_t j = threadIdx.x; j < valid; j += kThreads) {
    const __nv_bfloat16* k_row = k + j * ldkv + kv_offset;
    for (int h = 0; h < group; ++h) {
      const __nv_bfloat16* q_row = q_group + static_cast<std::int64_t>(h) * head_dim;
      float dot = 0.0f;
      for (int c = 0; c < head_dim; ++c) dot += __bfloat162float(q_row[c]) * __bfloat162float(k_row[c]);
      s[h * valid + j] = dot * scale;
    }
  }
  for (int h = 0; h < group; ++h) {
    float* sh = s + h * valid;
    float local_max = -FLT_MAX;
    for (std::int64_t j = threadIdx.x; j < valid; j += kThreads) local_max = fmaxf(local_max, sh[j]);
    const float row_max = block_reduce(local_max, true);
    float local_sum = 0.0f;
    for (std::int64_t j = threadIdx.x; j < valid; j += kThreads) {
      sh[j] = expf(sh[j] - row_max);
      local_sum += sh[j];
    }
    const float sum = block_reduce(local_sum, false);
    if (threadIdx.x == 0) inv_sums[h] = 1.0f / sum;
  }
  __syncthreads();  // every head's probabilities and inverse sum are visible to the whole block
  __nv_bfloat16* o_group = out + seq * ldq + kv_offset * group;
  for (int p = static_cast<int>(threadIdx.x); p < group * head_dim; p += kThreads) {
    const int h = p / head_dim;
    const int c = p % head_dim;
    const float* sh = s + h * valid;
    float acc = 0.0f;
    for (std::int64_t j = 0; j < valid; ++j) acc += sh[j] * __bfloat162float(v[j * ldkv + kv_offset + c]);
    o_group[p] = __float2bfloat16_rn(acc * inv_sums[h]);
  }
}

}  // namespace

std::int64_t decode_batch_scratch(std::vector<DecodeBatchEntry>& entries, int n_heads) {
  std::int64_t floats = 0;
  for (DecodeBatchEntry& e : entries) {
    if (e.past < 0) fail("cuda attention_decode_batch: a sequence after {} cached rows", e.past);
    e.scores = floats;
    floats += static_cast<std::int64_t>(n_heads) * (e.past + 1);
  }
  return floats;
}

void attention_decode_batch(const CudaDecodeBatchShape& shape, const DecodeBatchEntry* table,
                            std::int64_t scratch_floats, const std::uint16_t* q, const std::uint16_t* k_new,
                            const std::uint16_t* v_new, std::uint16_t* out, DeviceAllocator& allocator,
                            void* stream) {
  if (shape.sequences < 0 || shape.n_heads <= 0 || shape.n_kv_heads <= 0 || shape.n_heads % shape.n_kv_heads != 0 ||
      shape.head_dim <= 0) {
    fail("cuda attention_decode_batch: invalid shape ({} sequences, {} heads, {} kv heads, head_dim {})",
         shape.sequences, shape.n_heads, shape.n_kv_heads, shape.head_dim);
  }
  if (shape.sequences == 0) return;
  const std::int64_t blocks = shape.sequences * shape.n_kv_heads;
  if (blocks > 0x7fffffff) fail("cuda attention_decode_batch: {} (sequence, kv head) blocks exceed a grid", blocks);
  const int group = shape.n_heads / shape.n_kv_heads;
  if (group > kMaxDecodeGroup) {
    fail("cuda attention_decode_batch: {} query heads per kv head, at most {} (the inverse sums' shared memory)",
         group, kMaxDecodeGroup);
  }
  DeviceBuffer scores(allocator, static_cast<std::size_t>(scratch_floats) * sizeof(float), stream);
  attention_decode_batch_kernel<<<static_cast<unsigned>(blocks), kThreads, group * sizeof(float),
                                  static_cast<cudaStream_t>(stream)>>>(
      table, reinterpret_cast<const __nv_bfloat16*>(q), reinterpret_cast<const __nv_bfloat16*>(k_new),
      reinterpret_cast<const __nv_bfloat16*>(v_new), reinterpret_cast<__nv_bfloat16*>(out), scores.as<float>(),
      shape.n_kv_heads, group, shape.head_dim,
      static_cast<float>(1.0 / std::sqrt(static_cast<double>(shape.head_dim))));
  check_last_launch("attention_decode_batch_kernel");
}

void attention_cached_forward(const CudaCachedAttentionShape& shape, const std::uint16_t* q,
                              const std::uint16_t* k_cache, const std::uint16_t* v_cache, std::uint16_t* out,
                              DeviceAllocator& allocator, void* stream) {
  if (shape.queries < 0 || shape.past < 0 || shape.n_heads <= 0 || shape.n_kv_heads <= 0 ||
      shape.n_heads % shape.n_kv_heads != 0 || shape.head_dim <= 0) {
    fail("cuda attention_cached_forward: invalid shape ({} queries after {} cached rows, {} heads, {} kv heads, "
         "head_dim {})", shape.queries, shape.past, shape.n_heads, shape.n_kv_heads, shape.head_dim);
  }
  if (shape.queries == 0) return;
  const std::int64_t keys = shape.past + shape.queries;
  const std::int64_t blocks = shape.queries * shape.n_heads;
  if (blocks > 0x7fffffff) fail("cuda attention_cached_forward: {} (row, head) blocks exceed a grid", blocks);
  DeviceBuffer scores(allocator, static_cast<std::size_t>(blocks * keys) * sizeof(float), stream);
  attention_cached_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      reinterpret_cast<const __nv_bfloat16*>(q), reinterpret_cast<const __nv_bfloat16*>(k_cache),
      reinterpret_cast<const __nv_bfloat16*>(v_cache), reinterpret_cast<__nv_bfloat16*>(out), scores.as<float>(),
      shape.past, keys, shape.n_heads, shape.n_heads / shape.n_kv_heads, shape.head_dim,
      static_cast<float>(1.0 / std::sqrt(static_cast<double>(shape.head_dim))));
  check_last_launch("attention_cached_kernel");
}

}  // namespace odc::kernels::cuda
