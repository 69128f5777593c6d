// The real CUDA attention with key segments (context parallelism: a query chunk attends to a
// separate key segment, the causal diagonal aligned at the end), executed by the emulator, against
// the float64 reference (attention_reference.h, which writes the bottom-right mask straight from
// its definition); and the attention without key segments still bitwise what it was.
//
// Tolerances: those of test_attention.cpp (5e-3 normwise for out, dq, dk, dv; 1e-3 absolute for
// lse) for the same reasons: the kernels round P and dS to bf16 (2^-9 relative per element). A
// mask off by one key, or keys taken from the wrong segment, gives errors of order 1 (or NaN).
#include <catch2/catch.hpp>

#include "attention_checks.h"
#include "attention_harness.h"
#include "emu_block.h"
#include "odc/core/error.h"

using odc_emu_test::AttentionCase;
using odc_emu_test::bounds;
using odc_emu_test::check;
using odc_emu_test::run_attention;
namespace kc = odc::kernels::cuda;

namespace {

AttentionCase keyed(std::initializer_list<int> q_lens, std::initializer_list<int> k_lens, int heads, int kv, int d) {
  AttentionCase c{bounds(q_lens), heads, kv, d};
  c.cu_seqlens_k = bounds(k_lens);
  return c;
}

// FNV-1a over the bytes of the outputs.
template <typename T>
std::uint64_t fnv(const std::vector<T>& v, std::uint64_t h = 1469598103934665603ull) {
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  for (std::size_t i = 0; i < v.size() * sizeof(T); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// Forward and backward on the inputs test_attention's harness draws; the hash of every output bit.
std::uint64_t output_hash(const AttentionCase& c, std::uint32_t seed) {
  using namespace odc_emu_test;
  const std::int64_t T = c.tokens();
  const auto nq = static_cast<std::size_t>(T * c.n_heads * c.head_dim);
  const auto nkv = static_cast<std::size_t>(c.key_tokens() * c.n_kv_heads * c.head_dim);
  const Bf16Data q = random_bf16(nq, 1.0f, seed), k = random_bf16(nkv, 1.0f, seed + 1),
                 v = random_bf16(nkv, 1.0f, seed + 2), dout = random_bf16(nq, 1.0f, seed + 3);
  kc::CudaAttentionShape s;
  s.cu_seqlens = c.cu_seqlens.data();
  s.num_seqs = static_cast<int>(c.cu_seqlens.size()) - 1;
  s.tokens = T;
  s.n_heads = c.n_heads;
  s.n_kv_heads = c.n_kv_heads;
  s.head_dim = c.head_dim;
  if (!c.cu_seqlens_k.empty()) {
    s.cu_seqlens_k = c.cu_seqlens_k.data();
    s.key_tokens = c.key_tokens();
  }
  kc::DeviceAllocator a;
  std::vector<std::uint16_t> o(nq), dq(nq), dk(nkv), dv(nkv);
  std::vector<float> lse(static_cast<std::size_t>(T * c.n_heads));
  kc::attention_forward(s, q.bits.data(), k.bits.data(), v.bits.data(), o.data(), lse.data(), a, nullptr);
  kc::attention_backward(s, q.bits.data(), k.bits.data(), v.bits.data(), o.data(), lse.data(), dout.bits.data(),
                         dq.data(), dk.data(), dv.data(), a, nullptr);
  return fnv(dv, fnv(dk, fnv(dq, fnv(lse, fnv(o)))));
}

}  // namespace

TEST_CASE("attention key segments d64: offsets across tiles, an empty query segment with keys, GQA",
          "[emu][attention][key_segments]") {
  // Segments (q_len, k_len): offset 17 inside one key tile; no queries but 10 keys (dk/dv zero);
  // a 63-row chunk whose 130 keys cross two key tiles; one token; offset 0; 5 queries after 195
  // keys (the first query tile starts three key tiles in).
  const AttentionCase c = keyed({20, 0, 63, 1, 65, 5}, {37, 10, 130, 1, 65, 200}, 4, 1, 64);
  for (const auto& [heads, kv] : {std::pair{4, 1}, std::pair{2, 2}, std::pair{6, 2}}) {
    AttentionCase h = c;
    h.n_heads = heads;
    h.n_kv_heads = kv;
    check(h, 60u + static_cast<std::uint32_t>(heads));
  }
}

TEST_CASE("attention key segments d128: 32-query dK/dV steps against offsets", "[emu][attention][key_segments]") {
  check(keyed({33, 0, 129, 7}, {97, 0, 150, 40}, 4, 1, 128), 71);
  check(keyed({31, 64}, {64, 129}, 2, 2, 128), 72);
}

TEST_CASE("attention key segments: a zig-zag split of 150 tokens over 2 members in one call",
          "[emu][attention][key_segments]") {
  // Chunks of 38, 38, 37, 37 (ContextCut{150, 2}); member 0 holds chunks 0 and 3, member 1 chunks 1
  // and 2; each chunk's keys are the sequence's prefix up to its end.
  check(keyed({38, 37, 38, 37}, {38, 150, 76, 113}, 4, 2, 64), 81);
}

TEST_CASE("attention key segments: no queries at all: dk and dv are zero", "[emu][attention][key_segments]") {
  const auto e = run_attention(keyed({0, 0}, {12, 70}, 4, 2, 64), 91);
  CHECK(e.dk == 0.0);  // the reference is zero; an unwritten row (NaN) would not compare equal
  CHECK(e.dv == 0.0);
}

TEST_CASE("attention key segments: inconsistent bounds are an odc::Error naming the segment",
          "[emu][attention][key_segments]") {
  const std::vector<std::int32_t> cu = bounds({4, 9}), cu_k = bounds({4, 8});
  kc::CudaAttentionShape s;
  s.cu_seqlens = cu.data();
  s.num_seqs = 2;
  s.tokens = 13;
  s.n_heads = 2;
  s.n_kv_heads = 1;
  s.head_dim = 64;
  s.cu_seqlens_k = cu_k.data();
  s.key_tokens = 12;
  kc::DeviceAllocator a;
  CHECK_THROWS_WITH(kc::AttentionPlan(s, a, nullptr, kc::AttentionPlan::Staging::pageable),
                    Catch::Contains("segment 1 has 9 query rows but only 8 key rows"));
  const std::vector<std::int32_t> ok_k = bounds({4, 9});
  s.cu_seqlens_k = ok_k.data();  // consistent segments, but key_tokens (12) is not their end
  CHECK_THROWS_WITH(kc::AttentionPlan(s, a, nullptr, kc::AttentionPlan::Staging::pageable),
                    Catch::Contains("cu_seqlens_k ends at 13 but key_tokens = 12"));
}

TEST_CASE("attention without key segments: every output bit as before key segments existed",
          "[emu][attention][key_segments]") {
  // Hashes of out, lse, dq, dk, dv recorded with the kernels of commit 4523dc1 (before key
  // segments) on these inputs: the emulated arithmetic is the host's IEEE fp32 (exp2f, logf of the
  // C library), so a change of toolchain or C library may move them, never a change that leaves
  // the kernels' operations alone. Should they move for that reason, the identity-bounds check
  // below still shows the key-segment path adds nothing to the no-key case.
  const AttentionCase d64{{0, 63, 63, 128, 129, 258}, 4, 2, 64};
  const AttentionCase d128{{0, 65, 98, 98, 227}, 4, 1, 128};
  CHECK(output_hash(d64, 7) == 0x272bbeb164b0fb9aull);
  CHECK(output_hash(d128, 8) == 0xe06319151db8f1ddull);
  // Key segments that are the query rows themselves (offset 0 everywhere): the same bits.
  AttentionCase same = d64;
  same.cu_seqlens_k = same.cu_seqlens;
  CHECK(output_hash(same, 7) == output_hash(d64, 7));
}
