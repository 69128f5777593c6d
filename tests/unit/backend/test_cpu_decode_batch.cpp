// CpuBackend::attention_decode_batch (every sequence in one parallel region) against the
// Backend default it overrides (per sequence: the two copies into the caches and attention_cached),
// selected on the same backend by set_per_sequence_decode: bitwise the same outputs and caches, in
// fp32 and in the bf16 mode, for 1, 2 and 3 compute threads, over ragged cached lengths (none, one,
// a long one), GQA and MHA, head_dim 64 and 128. Bitwise, not within a tolerance: each (sequence,
// kv head) piece runs exactly the per-sequence kernel's arithmetic, and the pieces are fixed
// whatever the thread count. A profiler passes the setting on to the backend it wraps.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "odc/backend/cpu_backend.h"
#include "odc/backend/op_profiler.h"
#include "odc/core/dtype.h"
#include "odc/core/error.h"

using namespace odc;
using backend::ConstView;
using backend::CpuBackend;
using backend::View;

namespace {

struct Shape {
  int heads, kv_heads, head_dim;
};

std::vector<float> random_bf16(std::size_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = bf16_to_f32(f32_to_bf16(dist(rng)));
  return v;
}

View view(std::vector<float>& v) { return {v.data(), DType::f32, Device::cpu(), static_cast<std::int64_t>(v.size())}; }
ConstView cview(const std::vector<float>& v) {
  return {v.data(), DType::f32, Device::cpu(), static_cast<std::int64_t>(v.size())};
}

// One decoding step's data: every sequence's caches (past rows filled, room for the new one) and
// the new rows.
struct Step {
  std::vector<std::int64_t> past;
  std::vector<std::vector<float>> k_caches, v_caches;
  std::vector<float> q, k_new, v_new, out;
};

Step make_step(const Shape& s, const std::vector<std::int64_t>& past, std::uint32_t seed) {
  std::mt19937 rng(seed);
  const auto kv = static_cast<std::size_t>(s.kv_heads * s.head_dim),
             qd = static_cast<std::size_t>(s.heads * s.head_dim);
  Step st;
  st.past = past;
  for (const std::int64_t p : past) {
    // One spare row beyond the new one: the cache's capacity exceeds what a step reads.
    st.k_caches.push_back(random_bf16((static_cast<std::size_t>(p) + 2) * kv, rng));
    st.v_caches.push_back(random_bf16((static_cast<std::size_t>(p) + 2) * kv, rng));
  }
  st.q = random_bf16(past.size() * qd, rng);
  st.k_new = random_bf16(past.size() * kv, rng);
  st.v_new = random_bf16(past.size() * kv, rng);
  st.out.assign(past.size() * qd, std::numeric_limits<float>::quiet_NaN());  // every element must be written
  return st;
}

void run(CpuBackend& b, const Shape& s, Step& st) {
  std::vector<View> keys, values;
  for (std::size_t i = 0; i < st.past.size(); ++i) {
    keys.push_back(view(st.k_caches[i]));
    values.push_back(view(st.v_caches[i]));
  }
  b.attention_decode_batch({st.past, s.heads, s.kv_heads, s.head_dim}, cview(st.q), cview(st.k_new), cview(st.v_new),
                           keys, values, view(st.out));
}

}  // namespace

TEST_CASE("CpuBackend attention_decode_batch is bitwise the per-sequence default, any thread count",
          "[backend][decode]") {
  const std::vector<std::int64_t> past = {0, 7, 1, 300, 64, 0, 33, 129, 2, 1023, 5};
  const DType mode = GENERATE(DType::f32, DType::bf16);
  CAPTURE(dtype_name(mode));
  for (const Shape s : {Shape{8, 2, 64}, Shape{4, 4, 128}, Shape{6, 1, 64}}) {
    CAPTURE(s.heads, s.kv_heads, s.head_dim);
    const Step input = make_step(s, past, static_cast<std::uint32_t>(s.heads * 100 + s.head_dim));
    std::vector<float> first_out;
    for (const int threads : {1, 2, 3}) {
      CAPTURE(threads);
      CpuBackend b(threads, mode);
      Step batched = input, looped = input;
      run(b, s, batched);
      b.set_per_sequence_decode(true);
      run(b, s, looped);
      CHECK(batched.out == looped.out);
      CHECK(batched.k_caches == looped.k_caches);
      CHECK(batched.v_caches == looped.v_caches);
      // The new rows landed at row past (the spare row after them untouched), the outputs written.
      const auto kv = static_cast<std::size_t>(s.kv_heads * s.head_dim);
      for (std::size_t i = 0; i < past.size(); ++i) {
        const auto at = static_cast<std::ptrdiff_t>(static_cast<std::size_t>(past[i]) * kv);
        CHECK(std::equal(input.k_new.begin() + static_cast<std::ptrdiff_t>(i * kv),
                         input.k_new.begin() + static_cast<std::ptrdiff_t>((i + 1) * kv),
                         batched.k_caches[i].begin() + at));
        CHECK(std::equal(batched.v_caches[i].begin() + at + static_cast<std::ptrdiff_t>(kv), batched.v_caches[i].end(),
                         input.v_caches[i].begin() + at + static_cast<std::ptrdiff_t>(kv)));
      }
      CHECK(std::all_of(batched.out.begin(), batched.out.end(), [](float x) { return std::isfinite(x); }));
      if (mode == DType::bf16) {
        CHECK(std::all_of(batched.out.begin(), batched.out.end(),
                          [](float x) { return bf16_to_f32(f32_to_bf16(x)) == x; }));
      }
      if (first_out.empty()) first_out = batched.out;
      CHECK(batched.out == first_out);
    }
  }
}

TEST_CASE("CpuBackend attention_decode_batch refuses mismatched caches and short views", "[backend][decode]") {
  CpuBackend b(1);
  const Shape s{4, 2, 8};
  Step st = make_step(s, {3, 4}, 1);
  std::vector<View> one_key{view(st.k_caches[0])}, values{view(st.v_caches[0]), view(st.v_caches[1])};
  CHECK_THROWS_WITH(b.attention_decode_batch({st.past, s.heads, s.kv_heads, s.head_dim}, cview(st.q), cview(st.k_new),
                                             cview(st.v_new), one_key, values, view(st.out)),
                    Catch::Contains("2 sequences, 1 key and 2 value caches"));
  std::vector<float> short_cache(3 * 16);  // 3 rows of 16: sequence 1 after 4 rows needs 5
  std::vector<View> keys{view(st.k_caches[0]), view(short_cache)};
  CHECK_THROWS_WITH(b.attention_decode_batch({st.past, s.heads, s.kv_heads, s.head_dim}, cview(st.q), cview(st.k_new),
                                             cview(st.v_new), keys, values, view(st.out)),
                    Catch::Contains("sequence 1 after 4 cached rows needs caches of 80 elements"));
}

TEST_CASE("the per-sequence decode setting reaches the backend a profiler wraps", "[backend][decode]") {
  backend::ProfilingBackend profiler(std::make_unique<CpuBackend>(1));
  CHECK_FALSE(profiler.inner().per_sequence_decode());
  profiler.set_per_sequence_decode(true);
  CHECK(profiler.per_sequence_decode());
  CHECK(profiler.inner().per_sequence_decode());
}
