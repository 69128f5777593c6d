// attention_cache.cu executed by the emulator: new rows over a key/value cache against the
// float64 attention of the whole sequence (attention_reference.h), run as a prefill and then row
// by row or in chunks (MHA, GQA, MQA; head_dim 64 and an odd 20), and bitwise repeatable.
//
// Tolerance: the inputs are exact bf16 and the kernel keeps scores, probabilities and sums in
// fp32, so its only coarse rounding is the bf16 store of the output (relative 2^-9 per element,
// normwise at most ~2e-3); 4e-3 leaves room for the fp32 sums over up to 120 keys. A missing key,
// a wrong kv head or a wrong offset gives errors of order 1.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

#include "attention_reference.h"
#include "emu_test_support.h"
#include "odc/kernels/cuda_attention_cache.h"
#include "odc/kernels/cuda_device.h"

namespace kc = odc::kernels::cuda;
using namespace odc_emu_test;

namespace {

struct Run {
  std::vector<std::uint16_t> out;
  std::vector<double> reference;
};

// The sequence's rows computed chunk by chunk over the cache of everything before them.
Run run_chunks(int heads, int kv_heads, int head_dim, const std::vector<std::int64_t>& chunks, std::uint32_t seed) {
  std::int64_t T = 0;
  for (const auto n : chunks) T += n;
  const AttentionCase c{{0, static_cast<std::int32_t>(T)}, heads, kv_heads, head_dim};
  const auto ldq = static_cast<std::size_t>(heads * head_dim);
  const std::size_t nq = static_cast<std::size_t>(T) * ldq;
  const std::size_t nkv = static_cast<std::size_t>(T * kv_heads * head_dim);
  const Bf16Data q = random_bf16(nq, 1.0f, seed), k = random_bf16(nkv, 1.0f, seed + 1),
                 v = random_bf16(nkv, 1.0f, seed + 2);
  kc::DeviceAllocator allocator;
  // Guarded pages: a read past the cache's end faults; the output starts as NaN bits.
  GuardedBuffer q_buf(nq * 2), k_buf(nkv * 2), v_buf(nkv * 2), o_buf(nq * 2);
  q_buf.write(q.bits);
  k_buf.write(k.bits);
  v_buf.write(v.bits);
  std::int64_t past = 0;
  for (const auto n : chunks) {
    const std::size_t row0 = static_cast<std::size_t>(past) * ldq;
    kc::attention_cached_forward({n, past, heads, kv_heads, head_dim}, q_buf.as<std::uint16_t>() + row0,
                                 k_buf.as<std::uint16_t>(), v_buf.as<std::uint16_t>(), o_buf.as<std::uint16_t>() + row0,
                                 allocator, nullptr);
    past += n;
  }
  Run r;
  r.out = o_buf.read<std::uint16_t>(nq);
  std::vector<double> lse;
  AttentionReference(c, q.values, k.values, v.values).forward(r.reference, lse);
  return r;
}

}  // namespace

TEST_CASE("emu attention_cached: prefill, row-by-row and chunked decoding match the float64 attention",
          "[emu][attention_cache]") {
  struct Shape {
    int heads, kv_heads, head_dim;
  };
  for (const Shape s : {Shape{4, 4, 64}, Shape{4, 2, 64}, Shape{4, 1, 20}}) {
    INFO("heads " << s.heads << " kv heads " << s.kv_heads << " head_dim " << s.head_dim);
    const Run prefill = run_chunks(s.heads, s.kv_heads, s.head_dim, {40}, 9);
    CHECK(normwise_error(widen(prefill.out), prefill.reference) < 4e-3);
    std::vector<std::int64_t> decode = {5};
    decode.resize(36, 1);
    const Run rows = run_chunks(s.heads, s.kv_heads, s.head_dim, decode, 9);
    CHECK(normwise_error(widen(rows.out), rows.reference) < 4e-3);
    // The same inputs: every row's result is independent of how the rows were chunked.
    CHECK(rows.out == prefill.out);
    const Run chunked = run_chunks(s.heads, s.kv_heads, s.head_dim, {1, 70, 3, 46}, 21);
    CHECK(normwise_error(widen(chunked.out), chunked.reference) < 4e-3);
  }
}
