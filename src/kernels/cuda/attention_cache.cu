// Attention of new rows over a key/value cache (cuda_attention_cache.h).
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

}  // namespace

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
