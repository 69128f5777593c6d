// CUDA causal varlen GQA attention (cuda_attention.h) against cpu::attention_forward/backward<float>
// on the same bf16-rounded inputs. The CPU reference gets its own fp32 out/lse for the backward;
// the GPU backward uses the GPU forward's bf16 out and fp32 lse (as training does).
//
// Tolerances:
//   out  check_close(rel 1e-2, atol 4e-3 * max|ref|). The GPU rounds the unnormalized
//        probabilities (<= 1) to bf16 before P V: each has relative error <= 2^-9, so
//        |d out| <= 2^-9 * sum_j p_j |v_j| <= 2^-9 max|v| (~2e-3 max|ref|, as row 0 of every
//        sequence copies v); the bf16 storage of out adds <= 2^-9 |out| (covered by rel 1e-2).
//   lse  check_close(rel 1e-4, atol 1e-5 * max|ref|): fp32 on both sides (exp2 approximation and
//        summation order only).
//   dq/dk/dv  check_grad (cosine >= 0.999 and ||gpu - ref|| / ||ref|| <= 1e-2): P and dS are
//        rounded to bf16 for the tensor-core GEMMs (relative error <= 2^-9 each) and the results
//        are stored as bf16 (<= 2^-9 relative), so correct kernels sit at a few 1e-3 normwise;
//        1e-2 catches what the cosine alone lets through (up to ~4.5% of the norm).
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "odc/core/error.h"
#include "odc/kernels/attention.h"
#include "odc/kernels/cuda_attention.h"
#include "odc/kernels/cuda_device.h"

#include "cuda_test_support.h"

using namespace odc::test::cuda;
namespace cu = odc::kernels::cuda;
namespace cpu = odc::kernels::cpu;

namespace {

struct AttnCase {
  std::vector<std::int32_t> seqlens;
  int n_heads;
  int n_kv_heads;
  int head_dim;
  float q_scale = 1.0f;  // > 1 sharpens the softmax (larger logits, more max rescaling)
  std::vector<std::int32_t> key_lens = {};  // key segments (context parallelism); empty: none
};

std::string describe(const AttnCase& c) {
  std::string s = "[";
  for (std::size_t i = 0; i < c.seqlens.size(); ++i) s += (i ? "," : "") + std::to_string(c.seqlens[i]);
  s += "] " + std::to_string(c.n_heads) + "/" + std::to_string(c.n_kv_heads) + " d" +
       std::to_string(c.head_dim);
  if (c.q_scale != 1.0f) s += " sharp";
  if (!c.key_lens.empty()) {
    s += " keys [";
    for (std::size_t i = 0; i < c.key_lens.size(); ++i) s += (i ? "," : "") + std::to_string(c.key_lens[i]);
    s += "]";
  }
  return s;
}

void run_case(const AttnCase& c, std::mt19937& rng, cu::DeviceAllocator& alloc) {
  const std::string name = describe(c);
  INFO("case " << name);
  const PackedAttention packed = packed_attention(c.seqlens, c.n_heads, c.n_kv_heads, c.head_dim, c.key_lens);
  const std::vector<std::int32_t>& cu_seqlens = packed.cu_seqlens;
  const std::size_t nq = packed.nq, nkv = packed.nkv, nlse = packed.nlse;

  auto q = random_bf16(nq, rng, c.q_scale);
  auto k = random_bf16(nkv, rng);
  auto v = random_bf16(nkv, rng);
  auto dout = random_bf16(nq, rng);

  // ---- CPU reference (fp32) ----
  const auto cshape = packed.shape<cpu::AttentionShape>();
  std::vector<float> out_ref(nq), lse_ref(nlse), dq_ref(nq), dk_ref(nkv), dv_ref(nkv);
  cpu::attention_forward<float>(cshape, q.f.data(), k.f.data(), v.f.data(), out_ref.data(),
                                lse_ref.data());
  cpu::attention_backward<float>(cshape, q.f.data(), k.f.data(), v.f.data(), out_ref.data(),
                                 lse_ref.data(), dout.f.data(), dq_ref.data(), dk_ref.data(),
                                 dv_ref.data());

  // ---- GPU ----
  const auto gshape = packed.shape<cu::CudaAttentionShape>();
  auto d_q = to_device(alloc, q.bits), d_k = to_device(alloc, k.bits), d_v = to_device(alloc, v.bits);
  auto d_dout = to_device(alloc, dout.bits);
  cu::DeviceBuffer d_out(alloc, nq * 2), d_lse(alloc, nlse * 4);
  cu::DeviceBuffer d_dq(alloc, nq * 2), d_dk(alloc, nkv * 2), d_dv(alloc, nkv * 2);
  // Poison the outputs: every element must be written.
  cu::memset_async(d_out.get(), 0xff, nq * 2, nullptr);
  cu::memset_async(d_lse.get(), 0xff, nlse * 4, nullptr);
  cu::memset_async(d_dq.get(), 0xff, nq * 2, nullptr);
  cu::memset_async(d_dk.get(), 0xff, nkv * 2, nullptr);
  cu::memset_async(d_dv.get(), 0xff, nkv * 2, nullptr);

  cu::attention_forward(gshape, d_q.as<std::uint16_t>(), d_k.as<std::uint16_t>(),
                        d_v.as<std::uint16_t>(), d_out.as<std::uint16_t>(), d_lse.as<float>(),
                        alloc, nullptr);
  const auto out_bits = from_device<std::uint16_t>(d_out, nq);
  const auto lse = from_device<float>(d_lse, nlse);
  check_close(("attention out " + name).c_str(), to_f32(out_bits), out_ref, 1e-2, 4e-3);
  check_close(("attention lse " + name).c_str(), lse, lse_ref, 1e-4, 1e-5);

  cu::attention_backward(gshape, d_q.as<std::uint16_t>(), d_k.as<std::uint16_t>(),
                         d_v.as<std::uint16_t>(), d_out.as<std::uint16_t>(), d_lse.as<float>(),
                         d_dout.as<std::uint16_t>(), d_dq.as<std::uint16_t>(),
                         d_dk.as<std::uint16_t>(), d_dv.as<std::uint16_t>(), alloc, nullptr);
  const auto dq_bits = from_device<std::uint16_t>(d_dq, nq);
  const auto dk_bits = from_device<std::uint16_t>(d_dk, nkv);
  const auto dv_bits = from_device<std::uint16_t>(d_dv, nkv);
  check_grad(("attention dq " + name).c_str(), to_f32(dq_bits), dq_ref);
  check_grad(("attention dk " + name).c_str(), to_f32(dk_bits), dk_ref);
  check_grad(("attention dv " + name).c_str(), to_f32(dv_bits), dv_ref);

  // Deterministic: no atomics, fixed reduction orders -> bitwise identical reruns. The rerun takes
  // the planned path (one AttentionPlan used by two "layers", as in a microbatch) on a second,
  // non-blocking stream, with the outputs poisoned again.
  for (cu::DeviceBuffer* b : {&d_out, &d_dq, &d_dk, &d_dv}) cu::memset_async(b->get(), 0xff, b->bytes(), nullptr);
  cu::memset_async(d_lse.get(), 0xff, nlse * 4, nullptr);
  cu::device_synchronize();
  {
    cu::Stream stream;
    const cu::AttentionPlan plan(gshape, alloc, stream.handle());
    CHECK(plan.shape().tokens == packed.tokens);
    CHECK(plan.shape().cu_seqlens != cu_seqlens.data());  // the plan keeps its own copy
    for (int layer = 0; layer < 2; ++layer) {
      cu::attention_forward(plan, d_q.as<std::uint16_t>(), d_k.as<std::uint16_t>(),
                            d_v.as<std::uint16_t>(), d_out.as<std::uint16_t>(), d_lse.as<float>(),
                            stream.handle());
      cu::attention_backward(plan, d_q.as<std::uint16_t>(), d_k.as<std::uint16_t>(),
                             d_v.as<std::uint16_t>(), d_out.as<std::uint16_t>(), d_lse.as<float>(),
                             d_dout.as<std::uint16_t>(), d_dq.as<std::uint16_t>(),
                             d_dk.as<std::uint16_t>(), d_dv.as<std::uint16_t>(), alloc,
                             stream.handle());
    }
    stream.synchronize();
  }
  CHECK(from_device<std::uint16_t>(d_out, nq) == out_bits);
  CHECK(from_device<float>(d_lse, nlse) == lse);
  CHECK(from_device<std::uint16_t>(d_dq, nq) == dq_bits);
  CHECK(from_device<std::uint16_t>(d_dk, nkv) == dk_bits);
  CHECK(from_device<std::uint16_t>(d_dv, nkv) == dv_bits);
}

}  // namespace

TEST_CASE("attention matches the CPU kernel", "[cuda][attention]") {
  std::mt19937 rng(2024);
  cu::DeviceAllocator alloc;
  const std::vector<std::vector<std::int32_t>> batches = {
      {1, 17, 64, 200, 3}, {512}, {130, 1000}};
  std::vector<AttnCase> cases;
  for (const auto& seqlens : batches) {
    cases.push_back({seqlens, 8, 2, 128});
    cases.push_back({seqlens, 4, 4, 64});
  }
  cases.push_back({{1, 17, 64, 200, 3}, 8, 2, 64});
  cases.push_back({{1, 17, 64, 200, 3}, 4, 4, 128});
  // Tile boundaries (64 / 128 rows), an empty sequence, a group of 8 heads per kv head.
  cases.push_back({{127, 128, 129, 0, 63, 65}, 8, 1, 128});
  cases.push_back({{127, 128, 129, 0, 63, 65}, 8, 1, 64});
  // Large logits: the online max moves a lot between key tiles.
  cases.push_back({{300, 40}, 4, 2, 128, 4.0f});
  cases.push_back({{300, 40}, 4, 2, 64, 4.0f});
  for (const auto& c : cases) run_case(c, rng, alloc);
}

// Key segments (context parallelism): each query segment attends to its own key segment, the
// causal diagonal aligned at the end. The zig-zag split of a 1000-token sequence over 2 members
// (chunks of 250; member 0 holds chunks 0 and 3, member 1 chunks 1 and 2, each with the keys of
// the positions before its end) in one call; a query segment without rows but with keys (dk/dv
// zero); offsets that are not multiples of any tile. Same tolerances as above.
TEST_CASE("attention with key segments matches the CPU kernel", "[cuda][attention][key_segments]") {
  std::mt19937 rng(77);
  cu::DeviceAllocator alloc;
  for (const auto& [heads, kv, d] : {std::tuple{8, 2, 128}, std::tuple{4, 4, 64}, std::tuple{8, 1, 64}}) {
    run_case({{250, 250, 250, 250}, heads, kv, d, 1.0f, {250, 1000, 500, 750}}, rng, alloc);
    run_case({{0, 37, 129, 1}, heads, kv, d, 1.0f, {64, 100, 200, 1}}, rng, alloc);
  }
}

// The smallest cases that still cross tile edges and share kv heads: what compute-sanitizer's
// memcheck / racecheck / synccheck run in the GPU check (scripts/gpu-check.sh, tag [sanitize]).
TEST_CASE("attention on small ragged shapes (sanitizer cases)", "[cuda][attention][sanitize]") {
  std::mt19937 rng(5);
  cu::DeviceAllocator alloc;
  run_case({{63, 65, 0, 17}, 4, 2, 64}, rng, alloc);
  run_case({{63, 65, 0, 17}, 4, 2, 128}, rng, alloc);
  run_case({{20, 0, 63}, 4, 2, 64, 1.0f, {37, 10, 130}}, rng, alloc);  // key segments
}

TEST_CASE("attention rejects unsupported shapes", "[cuda][attention]") {
  cu::DeviceAllocator alloc;
  const std::vector<std::int32_t> cu_seqlens{0, 4};
  cu::DeviceBuffer buf(alloc, 4 * 8 * 128 * 2);
  cu::DeviceBuffer lse(alloc, 8 * 4 * 4);
  auto* p = buf.as<std::uint16_t>();
  cu::CudaAttentionShape shape;
  shape.cu_seqlens = cu_seqlens.data();
  shape.num_seqs = 1;
  shape.tokens = 4;
  shape.n_heads = 2;
  shape.n_kv_heads = 1;

  shape.head_dim = 96;
  CHECK_THROWS_AS(cu::attention_forward(shape, p, p, p, p, lse.as<float>(), alloc, nullptr),
                  odc::Error);
  shape.head_dim = 64;
  shape.n_kv_heads = 3;  // not a divisor of n_heads
  CHECK_THROWS_AS(cu::attention_forward(shape, p, p, p, p, lse.as<float>(), alloc, nullptr),
                  odc::Error);
  shape.n_kv_heads = 1;
  shape.tokens = 5;  // cu_seqlens ends at 4
  CHECK_THROWS_AS(cu::attention_backward(shape, p, p, p, p, lse.as<float>(), p, p, p, p, alloc,
                                         nullptr),
                  odc::Error);
  shape.tokens = 4;
  CHECK_NOTHROW(cu::attention_forward(shape, p, p, p, p + 4 * 2 * 64, lse.as<float>(), alloc,
                                      nullptr));
  cu::device_synchronize();
}

TEST_CASE("attention FLOP count is causal", "[cuda][attention]") {
  const std::vector<std::int32_t> cu_seqlens{0, 3, 5};
  cu::CudaAttentionShape shape;
  shape.cu_seqlens = cu_seqlens.data();
  shape.num_seqs = 2;
  shape.tokens = 5;
  shape.n_heads = 2;
  shape.n_kv_heads = 1;
  shape.head_dim = 64;
  // pairs: 3*4/2 + 2*3/2 = 9
  CHECK(cu::attention_forward_flops(shape) == 4.0 * 9 * 64 * 2);
}

TEST_CASE("AttentionPlan: tables built once, rebuilt per microbatch, same bits as per-call",
          "[cuda][attention][plan]") {
  std::mt19937 rng(77);
  cu::DeviceAllocator alloc;
  cu::Stream stream;
  const int heads = 4, kv_heads = 2, head_dim = 128;
  // Microbatches of different sizes: the plan's storage grows, then is reused.
  const std::vector<std::vector<std::int32_t>> microbatches = {
      {127, 128, 129, 0, 63, 65}, {1000, 24}, {5}, {64, 64, 64, 64}};
  cu::AttentionPlan plan;
  CHECK_FALSE(plan.built());
  for (const auto& seqlens : microbatches) {
    std::vector<std::int32_t> cu_seqlens{0};
    for (std::int32_t len : seqlens) cu_seqlens.push_back(cu_seqlens.back() + len);
    cu::CudaAttentionShape shape;
    shape.cu_seqlens = cu_seqlens.data();
    shape.num_seqs = static_cast<int>(seqlens.size());
    shape.tokens = cu_seqlens.back();
    shape.n_heads = heads;
    shape.n_kv_heads = kv_heads;
    shape.head_dim = head_dim;
    // Table sizes for D = 128: forward tiles of 128 query rows, dQ tiles of 64, dK/dV tiles of 64.
    std::size_t fwd = 0, t64 = 0;
    for (std::int32_t len : seqlens) {
      fwd += static_cast<std::size_t>((len + 127) / 128);
      t64 += static_cast<std::size_t>((len + 63) / 64);
    }
    plan.build(shape, alloc, stream.handle());
    cu_seqlens.assign(cu_seqlens.size(), -1);  // the plan must not read the caller's copy again
    CHECK(plan.built());
    CHECK(plan.forward_tiles() == fwd);
    CHECK(plan.dq_tiles() == t64);
    CHECK(plan.dkv_tiles() == t64);
    CHECK(plan.shape().cu_seqlens[plan.shape().num_seqs] == shape.tokens);

    const std::size_t nq = static_cast<std::size_t>(shape.tokens) * heads * head_dim;
    const std::size_t nkv = static_cast<std::size_t>(shape.tokens) * kv_heads * head_dim;
    const std::size_t nlse = static_cast<std::size_t>(shape.tokens) * heads;
    auto q = random_bf16(nq, rng), k = random_bf16(nkv, rng), v = random_bf16(nkv, rng);
    auto dout = random_bf16(nq, rng);
    auto d_q = to_device(alloc, q.bits), d_k = to_device(alloc, k.bits), d_v = to_device(alloc, v.bits);
    auto d_dout = to_device(alloc, dout.bits);
    struct Outputs {
      cu::DeviceBuffer out, lse, dq, dk, dv;
    };
    auto make = [&] {
      return Outputs{cu::DeviceBuffer(alloc, nq * 2), cu::DeviceBuffer(alloc, nlse * 4),
                     cu::DeviceBuffer(alloc, nq * 2), cu::DeviceBuffer(alloc, nkv * 2),
                     cu::DeviceBuffer(alloc, nkv * 2)};
    };
    Outputs planned = make(), per_call = make();
    cu::device_synchronize();
    cu::attention_forward(plan, d_q.as<std::uint16_t>(), d_k.as<std::uint16_t>(),
                          d_v.as<std::uint16_t>(), planned.out.as<std::uint16_t>(),
                          planned.lse.as<float>(), stream.handle());
    cu::attention_backward(plan, d_q.as<std::uint16_t>(), d_k.as<std::uint16_t>(),
                           d_v.as<std::uint16_t>(), planned.out.as<std::uint16_t>(),
                           planned.lse.as<float>(), d_dout.as<std::uint16_t>(),
                           planned.dq.as<std::uint16_t>(), planned.dk.as<std::uint16_t>(),
                           planned.dv.as<std::uint16_t>(), alloc, stream.handle());
    stream.synchronize();
    shape.cu_seqlens = plan.shape().cu_seqlens;
    cu::attention_forward(shape, d_q.as<std::uint16_t>(), d_k.as<std::uint16_t>(),
                          d_v.as<std::uint16_t>(), per_call.out.as<std::uint16_t>(),
                          per_call.lse.as<float>(), alloc, nullptr);
    cu::attention_backward(shape, d_q.as<std::uint16_t>(), d_k.as<std::uint16_t>(),
                           d_v.as<std::uint16_t>(), per_call.out.as<std::uint16_t>(),
                           per_call.lse.as<float>(), d_dout.as<std::uint16_t>(),
                           per_call.dq.as<std::uint16_t>(), per_call.dk.as<std::uint16_t>(),
                           per_call.dv.as<std::uint16_t>(), alloc, nullptr);
    CHECK(from_device<std::uint16_t>(planned.out, nq) == from_device<std::uint16_t>(per_call.out, nq));
    CHECK(from_device<float>(planned.lse, nlse) == from_device<float>(per_call.lse, nlse));
    CHECK(from_device<std::uint16_t>(planned.dq, nq) == from_device<std::uint16_t>(per_call.dq, nq));
    CHECK(from_device<std::uint16_t>(planned.dk, nkv) == from_device<std::uint16_t>(per_call.dk, nkv));
    CHECK(from_device<std::uint16_t>(planned.dv, nkv) == from_device<std::uint16_t>(per_call.dv, nkv));
  }
  // A plan that was never built is an error, not a launch over garbage.
  const cu::AttentionPlan empty;
  cu::DeviceBuffer buf(alloc, 4096);
  auto* p = buf.as<std::uint16_t>();
  CHECK_THROWS_AS(cu::attention_forward(empty, p, p, p, p, buf.as<float>(), nullptr), odc::Error);
}
