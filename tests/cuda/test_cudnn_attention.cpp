// cuDNN's fused attention (cuda_cudnn_attention.h) against the CPU kernel (cpu::attention_*<float>
// on the same bf16-rounded inputs) and against the native CUDA kernel, on ragged batches with
// empty and one-token sequences, GQA 32/8 d128 and MHA 16/16 d64; the lse of either forward
// feeds either backward; the backward is bitwise reproducible; graphs are cached per shape class
// (the backward's per token bucket); no call runs with more workspace than the bound (a
// microbatch of 64 sequences with one of 4,000 tokens), and one over it is refused, writes
// nothing, and runs on the native kernels through the backend. Skipped, with the reason printed,
// where cuDNN cannot run (no frontend in the build, no loadable libcudnn, a device or cuDNN
// version the choice rules out: attention_choice.h).
//
// Tolerances (as tests/cuda/test_cuda_attention.cpp, whose reasoning holds for any kernel that
// rounds P and dS to bf16 for the tensor cores and stores bf16 results):
//   out   check_close(rel 1e-2, atol 4e-3 * max|ref|) against the CPU and against native
//   lse   check_close(rel 1e-4, atol 1e-5 * max|ref|): fp32 on every side
//   grads check_grad: cosine >= 0.999 and ||x - ref|| / ||ref|| <= 1e-2 (CPU and native)
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "odc/backend/cuda_backend.h"
#include "odc/core/error.h"
#include "odc/kernels/attention.h"
#include "odc/kernels/attention_choice.h"
#include "odc/kernels/cuda_attention.h"
#include "odc/kernels/cuda_cudnn_attention.h"
#include "odc/kernels/cuda_device.h"

#include "cuda_test_support.h"

using namespace odc::test::cuda;
namespace cu = odc::kernels::cuda;
namespace cpu = odc::kernels::cpu;
namespace k = odc::kernels;

namespace {

// True where cuDNN can run these heads here; otherwise prints why (the test is then skipped).
bool cudnn_runs(int n_heads, int n_kv_heads, int head_dim) {
  const auto blocker = k::cudnn_attention_blocker(cu::device_attention_facts(0, n_heads, n_kv_heads, head_dim));
  if (blocker) {
    std::printf("SKIP [cudnn]: %s\n", blocker->c_str());
    WARN("cuDNN attention not tested: " << *blocker);
    return false;
  }
  std::printf("[cuda] cuDNN %s, compute capability %d\n",
              k::cudnn_version_text(cu::cudnn_runtime_version()).c_str(), cu::compute_capability(0));
  return true;
}

struct Case {
  std::vector<std::int32_t> seqlens;
  int n_heads, n_kv_heads, head_dim;
};

std::string describe(const Case& c) {
  std::string s = "[";
  for (std::size_t i = 0; i < c.seqlens.size(); ++i) s += (i ? "," : "") + std::to_string(c.seqlens[i]);
  return s + "] " + std::to_string(c.n_heads) + "/" + std::to_string(c.n_kv_heads) + " d" + std::to_string(c.head_dim);
}

// Device outputs of one implementation's forward and backward.
struct Outputs {
  cu::DeviceBuffer out, lse, dq, dk, dv;
  Outputs(cu::DeviceAllocator& a, std::size_t nq, std::size_t nkv, std::size_t nlse)
      : out(a, nq * 2), lse(a, nlse * 4), dq(a, nq * 2), dk(a, nkv * 2), dv(a, nkv * 2) {
    poison();
  }
  void poison() {  // every element must be written
    for (cu::DeviceBuffer* b : {&out, &lse, &dq, &dk, &dv}) cu::memset_async(b->get(), 0xff, b->bytes(), nullptr);
  }
  std::uint16_t* bf(cu::DeviceBuffer& b) { return b.as<std::uint16_t>(); }
};

struct Host {
  std::vector<std::uint16_t> out, dq, dk, dv;
  std::vector<float> lse;
};

Host download_all(Outputs& o, std::size_t nq, std::size_t nkv, std::size_t nlse) {
  return {from_device<std::uint16_t>(o.out, nq), from_device<std::uint16_t>(o.dq, nq),
          from_device<std::uint16_t>(o.dk, nkv), from_device<std::uint16_t>(o.dv, nkv),
          from_device<float>(o.lse, nlse)};
}

void run_case(const Case& c, std::mt19937& rng, cu::DeviceAllocator& alloc, cu::CudnnAttention& cudnn) {
  const std::string name = describe(c);
  INFO("case " << name);
  const PackedAttention packed = packed_attention(c.seqlens, c.n_heads, c.n_kv_heads, c.head_dim);
  const std::size_t nq = packed.nq, nkv = packed.nkv, nlse = packed.nlse;
  auto q = random_bf16(nq, rng), kk = random_bf16(nkv, rng), v = random_bf16(nkv, rng), dout = random_bf16(nq, rng);

  const auto cshape = packed.shape<cpu::AttentionShape>();
  std::vector<float> out_ref(nq), lse_ref(nlse), dq_ref(nq), dk_ref(nkv), dv_ref(nkv);
  cpu::attention_forward<float>(cshape, q.f.data(), kk.f.data(), v.f.data(), out_ref.data(), lse_ref.data());
  cpu::attention_backward<float>(cshape, q.f.data(), kk.f.data(), v.f.data(), out_ref.data(), lse_ref.data(),
                                 dout.f.data(), dq_ref.data(), dk_ref.data(), dv_ref.data());

  const auto shape = packed.shape<cu::CudaAttentionShape>();
  auto d_q = to_device(alloc, q.bits), d_k = to_device(alloc, kk.bits), d_v = to_device(alloc, v.bits);
  auto d_dout = to_device(alloc, dout.bits);
  const auto* pq = d_q.as<std::uint16_t>();
  const auto* pk = d_k.as<std::uint16_t>();
  const auto* pv = d_v.as<std::uint16_t>();
  const auto* pdo = d_dout.as<std::uint16_t>();

  Outputs native(alloc, nq, nkv, nlse), fused(alloc, nq, nkv, nlse);
  cu::attention_forward(shape, pq, pk, pv, native.bf(native.out), native.lse.as<float>(), alloc, nullptr);
  cu::attention_backward(shape, pq, pk, pv, native.bf(native.out), native.lse.as<float>(), pdo, native.bf(native.dq),
                         native.bf(native.dk), native.bf(native.dv), alloc, nullptr);
  REQUIRE(cudnn.forward(shape, pq, pk, pv, fused.bf(fused.out), fused.lse.as<float>(), alloc, nullptr));
  REQUIRE(cudnn.backward(shape, pq, pk, pv, fused.bf(fused.out), fused.lse.as<float>(), pdo, fused.bf(fused.dq),
                         fused.bf(fused.dk), fused.bf(fused.dv), alloc, nullptr));
  const Host n = download_all(native, nq, nkv, nlse);
  const Host f = download_all(fused, nq, nkv, nlse);

  check_close(("cudnn out vs cpu " + name).c_str(), to_f32(f.out), out_ref, 1e-2, 4e-3);
  check_close(("cudnn lse vs cpu " + name).c_str(), f.lse, lse_ref, 1e-4, 1e-5);
  check_grad(("cudnn dq vs cpu " + name).c_str(), to_f32(f.dq), dq_ref);
  check_grad(("cudnn dk vs cpu " + name).c_str(), to_f32(f.dk), dk_ref);
  check_grad(("cudnn dv vs cpu " + name).c_str(), to_f32(f.dv), dv_ref);
  check_close(("cudnn out vs native " + name).c_str(), to_f32(f.out), to_f32(n.out), 1e-2, 4e-3);
  check_close(("cudnn lse vs native " + name).c_str(), f.lse, n.lse, 1e-4, 1e-5);
  check_grad(("cudnn dq vs native " + name).c_str(), to_f32(f.dq), to_f32(n.dq));
  check_grad(("cudnn dk vs native " + name).c_str(), to_f32(f.dk), to_f32(n.dk));
  check_grad(("cudnn dv vs native " + name).c_str(), to_f32(f.dv), to_f32(n.dv));

  // The lse round trip across implementations: cuDNN's backward from the native forward, and the
  // native backward from cuDNN's forward (what a fallback between them relies on).
  Outputs cross(alloc, nq, nkv, nlse);
  REQUIRE(cudnn.backward(shape, pq, pk, pv, native.bf(native.out), native.lse.as<float>(), pdo, cross.bf(cross.dq),
                         cross.bf(cross.dk), cross.bf(cross.dv), alloc, nullptr));
  check_grad(("cudnn bwd of native fwd dq " + name).c_str(), to_f32(from_device<std::uint16_t>(cross.dq, nq)), dq_ref);
  check_grad(("cudnn bwd of native fwd dk " + name).c_str(), to_f32(from_device<std::uint16_t>(cross.dk, nkv)), dk_ref);
  cross.poison();
  cu::attention_backward(shape, pq, pk, pv, fused.bf(fused.out), fused.lse.as<float>(), pdo, cross.bf(cross.dq),
                         cross.bf(cross.dk), cross.bf(cross.dv), alloc, nullptr);
  check_grad(("native bwd of cudnn fwd dq " + name).c_str(), to_f32(from_device<std::uint16_t>(cross.dq, nq)), dq_ref);
  check_grad(("native bwd of cudnn fwd dv " + name).c_str(), to_f32(from_device<std::uint16_t>(cross.dv, nkv)), dv_ref);

  // Deterministic: a rerun (outputs poisoned, on another stream) gives the same bits.
  fused.poison();
  cu::device_synchronize();
  {
    cu::Stream stream;
    REQUIRE(cudnn.forward(shape, pq, pk, pv, fused.bf(fused.out), fused.lse.as<float>(), alloc, stream.handle()));
    REQUIRE(cudnn.backward(shape, pq, pk, pv, fused.bf(fused.out), fused.lse.as<float>(), pdo, fused.bf(fused.dq),
                           fused.bf(fused.dk), fused.bf(fused.dv), alloc, stream.handle()));
    stream.synchronize();
  }
  const Host again = download_all(fused, nq, nkv, nlse);
  CHECK(again.out == f.out);
  CHECK(again.lse == f.lse);
  CHECK(again.dq == f.dq);
  CHECK(again.dk == f.dk);
  CHECK(again.dv == f.dv);
}

}  // namespace

TEST_CASE("cuDNN attention matches the CPU and the native kernels", "[cuda][cudnn]") {
  if (!cudnn_runs(32, 8, 128) || !cudnn_runs(16, 16, 64)) return;
  std::mt19937 rng(2031);
  cu::DeviceAllocator alloc;
  cu::CudnnAttention cudnn;
  // Ragged with empty and one-token sequences; one long sequence; a single token.
  const std::vector<std::vector<std::int32_t>> batches = {{1, 0, 17, 64, 200, 3, 0, 129}, {1000, 24}, {1}};
  for (const auto& seqlens : batches) {
    run_case({seqlens, 32, 8, 128}, rng, alloc, cudnn);
    run_case({seqlens, 16, 16, 64}, rng, alloc, cudnn);
  }
}

TEST_CASE("cuDNN attention: graphs built once per shape class, least recently used dropped", "[cuda][cudnn]") {
  if (!cudnn_runs(8, 2, 64)) return;
  std::mt19937 rng(7);
  cu::DeviceAllocator alloc;
  cu::CudnnAttention cudnn(true, 2);  // room for one class's forward and backward
  auto run = [&](const std::vector<std::int32_t>& seqlens) {
    std::vector<std::int32_t> bounds{0};
    for (std::int32_t len : seqlens) bounds.push_back(bounds.back() + len);
    cu::CudaAttentionShape shape{bounds.data(), static_cast<int>(seqlens.size()), bounds.back(), 8, 2, 64};
    const std::size_t nq = static_cast<std::size_t>(shape.tokens) * 8 * 64, nkv = nq / 4;
    auto q = to_device(alloc, random_bf16(nq, rng).bits), kk = to_device(alloc, random_bf16(nkv, rng).bits);
    auto v = to_device(alloc, random_bf16(nkv, rng).bits), dout = to_device(alloc, random_bf16(nq, rng).bits);
    Outputs o(alloc, nq, nkv, static_cast<std::size_t>(shape.tokens) * 8);
    REQUIRE(cudnn.forward(shape, q.as<std::uint16_t>(), kk.as<std::uint16_t>(), v.as<std::uint16_t>(), o.bf(o.out),
                          o.lse.as<float>(), alloc, nullptr));
    REQUIRE(cudnn.backward(shape, q.as<std::uint16_t>(), kk.as<std::uint16_t>(), v.as<std::uint16_t>(), o.bf(o.out),
                           o.lse.as<float>(), dout.as<std::uint16_t>(), o.bf(o.dq), o.bf(o.dk), o.bf(o.dv), alloc,
                           nullptr));
    cu::device_synchronize();
  };
  CHECK(cu::cudnn_batch_bucket(3) == 4);
  CHECK(cu::cudnn_seqlen_bucket(100) == 128);
  run({100, 5, 60});  // B 4, S 128, 165 tokens: the backward's token bucket 256
  CHECK(cudnn.stats().graph_builds == 2);
  run({128, 1, 0, 70});  // the same class (199 tokens, bucket 256): no build
  CHECK(cudnn.stats().graph_builds == 2);
  run({128, 128, 128, 100});  // 484 tokens, bucket 512: the forward's graph serves, a backward is built
  CHECK(cudnn.stats().graph_builds == 3);
  CHECK(cudnn.stats().evictions == 1);  // the bucket-256 backward
  run({65, 3});  // B 2: a new class, both directions
  CHECK(cudnn.stats().graph_builds == 5);
  CHECK(cudnn.stats().cached == 2);
  CHECK(cudnn.stats().evictions == 3);
  run({100, 5, 60});  // evicted: built again
  CHECK(cudnn.stats().graph_builds == 7);
  CHECK(cudnn.stats().fallbacks == 0);
}

// Row 6 of the review: a microbatch of many sequences and one long one. cuDNN below 9.25 sizes the
// deterministic backward's dP scratch over the padded 64 x 4096 view (64 x 32 heads x 4096 x 4096 x
// 2 B = 64 GiB); 9.25+ on Hopper takes the ordered-dQ engine there, whose workspace the token
// bucket (8192, set as max_total_seq_len) keeps linear in the tokens. Either way no call may run
// with more workspace than the bound: it runs, within it, or is refused (counted, nothing written).
TEST_CASE("cuDNN attention: many sequences and one long one stay within the workspace bound", "[cuda][cudnn]") {
  if (!cudnn_runs(32, 8, 128)) return;
  std::mt19937 rng(64);
  std::vector<std::int32_t> seqlens(63, 16);
  seqlens.push_back(4000);
  const PackedAttention packed = packed_attention(seqlens, 32, 8, 128);
  const auto shape = packed.shape<cu::CudaAttentionShape>();
  const std::size_t nq = packed.nq, nkv = packed.nkv, nlse = packed.nlse;
  auto q = random_bf16(nq, rng), kk = random_bf16(nkv, rng), v = random_bf16(nkv, rng), dout = random_bf16(nq, rng);
  cu::DeviceAllocator alloc;
  auto d_q = to_device(alloc, q.bits), d_k = to_device(alloc, kk.bits), d_v = to_device(alloc, v.bits);
  auto d_dout = to_device(alloc, dout.bits);
  const auto* pq = d_q.as<std::uint16_t>();
  const auto* pk = d_k.as<std::uint16_t>();
  const auto* pv = d_v.as<std::uint16_t>();
  Outputs native(alloc, nq, nkv, nlse), fused(alloc, nq, nkv, nlse);
  cu::attention_forward(shape, pq, pk, pv, native.bf(native.out), native.lse.as<float>(), alloc, nullptr);
  cu::attention_backward(shape, pq, pk, pv, native.bf(native.out), native.lse.as<float>(), d_dout.as<std::uint16_t>(),
                         native.bf(native.dq), native.bf(native.dk), native.bf(native.dv), alloc, nullptr);

  const std::int64_t bound = k::kCudnnWorkspaceLimitMiB << 20;
  cu::CudnnAttention cudnn(true, 16, bound);
  const bool forward_ran =
      cudnn.forward(shape, pq, pk, pv, fused.bf(fused.out), fused.lse.as<float>(), alloc, nullptr);
  INFO("forward refusal: " << cudnn.refusal());
  REQUIRE(forward_ran);  // the forward keeps no per-token or dP workspace
  // The backward from the native forward (the same lse layout), so a refusal leaves dq poisoned.
  const bool backward_ran =
      cudnn.backward(shape, pq, pk, pv, native.bf(native.out), native.lse.as<float>(), d_dout.as<std::uint16_t>(),
                     fused.bf(fused.dq), fused.bf(fused.dk), fused.bf(fused.dv), alloc, nullptr);
  cu::device_synchronize();
  const cu::CudnnAttentionStats st = cudnn.stats();
  const int version = cu::cudnn_runtime_version(), cc = cu::compute_capability(0);
  std::printf("[cuda] cuDNN %s, cc %d: 64 sequences (longest 4000): backward %s, largest workspace %.1f MiB of %.1f MiB%s%s\n",
              k::cudnn_version_text(version).c_str(), cc, backward_ran ? "ran" : "refused",
              static_cast<double>(st.largest_workspace) / 1048576.0, static_cast<double>(bound) / 1048576.0,
              backward_ran ? "" : ": ", cudnn.refusal().c_str());
  CHECK(st.largest_workspace <= bound);
  if (cc / 10 == 9 && version >= 92500) CHECK(backward_ran);  // the ordered-dQ engine, linear in the tokens
  if (backward_ran) {
    CHECK(st.fallbacks == 0);
    check_close("cudnn out vs native (many + one long)", to_f32(from_device<std::uint16_t>(fused.out, nq)),
                to_f32(from_device<std::uint16_t>(native.out, nq)), 1e-2, 4e-3);
    check_grad("cudnn dq vs native (many + one long)", to_f32(from_device<std::uint16_t>(fused.dq, nq)),
               to_f32(from_device<std::uint16_t>(native.dq, nq)));
    check_grad("cudnn dk vs native (many + one long)", to_f32(from_device<std::uint16_t>(fused.dk, nkv)),
               to_f32(from_device<std::uint16_t>(native.dk, nkv)));
    check_grad("cudnn dv vs native (many + one long)", to_f32(from_device<std::uint16_t>(fused.dv, nkv)),
               to_f32(from_device<std::uint16_t>(native.dv, nkv)));
  } else {
    CHECK(st.fallbacks == 1);
    CHECK_THAT(cudnn.refusal(), Catch::Contains("backward graph") && Catch::Contains("model.cudnn_workspace_mib"));
    const auto dq = from_device<std::uint16_t>(fused.dq, nq);
    CHECK(std::all_of(dq.begin(), dq.end(), [](std::uint16_t b) { return b == 0xffff; }));  // nothing written
  }
}

// The refusal itself, on any cuDNN: under a 1 KiB bound the backward (whose softmax sums alone
// take 4 B per token and head) is refused, counted and writes nothing; the backend then runs the
// native kernels for it and agrees with them bit for bit.
TEST_CASE("cuDNN attention: a call over the workspace bound is refused and the backend runs native", "[cuda][cudnn]") {
  if (!cudnn_runs(8, 2, 64)) return;
  std::mt19937 rng(11);
  const PackedAttention packed = packed_attention({100, 5, 60}, 8, 2, 64);
  const auto shape = packed.shape<cu::CudaAttentionShape>();
  const std::size_t nq = packed.nq, nkv = packed.nkv, nlse = packed.nlse;
  auto q = random_bf16(nq, rng), kk = random_bf16(nkv, rng), v = random_bf16(nkv, rng), dout = random_bf16(nq, rng);
  cu::DeviceAllocator alloc;
  auto d_q = to_device(alloc, q.bits), d_k = to_device(alloc, kk.bits), d_v = to_device(alloc, v.bits);
  auto d_dout = to_device(alloc, dout.bits);
  const auto* pq = d_q.as<std::uint16_t>();
  const auto* pk = d_k.as<std::uint16_t>();
  const auto* pv = d_v.as<std::uint16_t>();
  Outputs native(alloc, nq, nkv, nlse), fused(alloc, nq, nkv, nlse);
  cu::attention_forward(shape, pq, pk, pv, native.bf(native.out), native.lse.as<float>(), alloc, nullptr);
  cu::device_synchronize();  // the backend below runs on a stream of its own
  cu::CudnnAttention cudnn(true, 16, 1024);
  CHECK_FALSE(cudnn.backward(shape, pq, pk, pv, native.bf(native.out), native.lse.as<float>(),
                             d_dout.as<std::uint16_t>(), fused.bf(fused.dq), fused.bf(fused.dk), fused.bf(fused.dv),
                             alloc, nullptr));
  CHECK(cudnn.stats().fallbacks == 1);
  CHECK_THAT(cudnn.refusal(), Catch::Contains("backward graph of a padded batch 4 x 128") &&
                                  Catch::Contains("token bucket 256") && Catch::Contains("over the bound of 0.0 MiB"));
  const auto dq = from_device<std::uint16_t>(fused.dq, nq);
  CHECK(std::all_of(dq.begin(), dq.end(), [](std::uint16_t b) { return b == 0xffff; }));

  // Through the backend (model.attention cudnn, model.cudnn_workspace_mib of 1 KiB): the backward
  // runs on the native kernels, the same kernels and inputs as cu::attention_backward above.
  odc::backend::CudaBackend backend(0, k::AttentionMode::cudnn, 1024);
  REQUIRE_THAT(backend.select_attention(8, 2, 64), Catch::StartsWith("cudnn:"));
  odc::backend::Buffer bounds(backend.memory(), odc::DType::i32);
  const odc::backend::ConstView d_bounds = backend.upload(std::span<const std::int32_t>(packed.cu_seqlens), bounds);
  const odc::backend::AttentionShape bs{d_bounds, packed.cu_seqlens, packed.num_seqs, packed.tokens, 8, 2, 64};
  backend.prepare_microbatch(bs);
  auto view = [](cu::DeviceBuffer& b, std::size_t n, odc::DType t) {
    return odc::backend::View{b.get(), t, odc::Device::cuda(0), static_cast<std::int64_t>(n)};
  };
  auto in = [&](cu::DeviceBuffer& b, std::size_t n, odc::DType t) { return odc::backend::ConstView(view(b, n, t)); };
  Outputs through(alloc, nq, nkv, nlse);
  backend.attention_backward(bs, in(d_q, nq, odc::DType::bf16), in(d_k, nkv, odc::DType::bf16),
                             in(d_v, nkv, odc::DType::bf16), in(native.out, nq, odc::DType::bf16),
                             in(native.lse, nlse, odc::DType::f32), in(d_dout, nq, odc::DType::bf16),
                             view(through.dq, nq, odc::DType::bf16), view(through.dk, nkv, odc::DType::bf16),
                             view(through.dv, nkv, odc::DType::bf16));
  backend.synchronize();
  cu::attention_backward(shape, pq, pk, pv, native.bf(native.out), native.lse.as<float>(), d_dout.as<std::uint16_t>(),
                         native.bf(native.dq), native.bf(native.dk), native.bf(native.dv), alloc, nullptr);
  cu::device_synchronize();
  CHECK(from_device<std::uint16_t>(through.dq, nq) == from_device<std::uint16_t>(native.dq, nq));
  CHECK(from_device<std::uint16_t>(through.dv, nkv) == from_device<std::uint16_t>(native.dv, nkv));
}

TEST_CASE("CudaBackend: model.attention cudnn selects cuDNN or fails naming the key", "[cuda][cudnn]") {
  const auto blocker = k::cudnn_attention_blocker(cu::device_attention_facts(0, 32, 8, 128));
  odc::backend::CudaBackend cudnn_backend(0, k::AttentionMode::cudnn);
  if (blocker) {
    std::printf("[cuda] cuDNN ruled out here: %s\n", blocker->c_str());
    CHECK_THROWS_WITH(cudnn_backend.select_attention(32, 8, 128), Catch::Contains("model.attention=cudnn"));
    odc::backend::CudaBackend auto_backend(0, k::AttentionMode::automatic);
    CHECK_THAT(auto_backend.select_attention(32, 8, 128), Catch::StartsWith("native:") && Catch::Contains(*blocker));
    CHECK(auto_backend.attention_impl() == k::AttentionImpl::native);
  } else {
    CHECK_THAT(cudnn_backend.select_attention(32, 8, 128), Catch::StartsWith("cudnn:"));
    CHECK(cudnn_backend.attention_impl() == k::AttentionImpl::cudnn);
  }
  odc::backend::CudaBackend native_backend(0, k::AttentionMode::native);
  CHECK_THAT(native_backend.select_attention(32, 8, 128), Catch::StartsWith("native:"));
  CHECK(native_backend.attention_impl() == k::AttentionImpl::native);
}

TEST_CASE("cuDNN stats transpose", "[cuda][cudnn]") {
  cu::DeviceAllocator alloc;
  const std::int64_t rows = 37, cols = 5;
  std::vector<float> src(static_cast<std::size_t>(rows * cols));
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i) * 0.5f - 3.0f;
  auto d_src = to_device(alloc, src);
  cu::DeviceBuffer d_t(alloc, src.size() * 4), d_back(alloc, src.size() * 4);
  cu::transpose_f32(d_src.as<float>(), d_t.as<float>(), rows, cols, nullptr);
  cu::transpose_f32(d_t.as<float>(), d_back.as<float>(), cols, rows, nullptr);
  const auto t = from_device<float>(d_t, src.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      REQUIRE(t[static_cast<std::size_t>(c * rows + r)] == src[static_cast<std::size_t>(r * cols + c)]);
    }
  }
  CHECK(from_device<float>(d_back, src.size()) == src);
}
