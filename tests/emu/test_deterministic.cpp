// The deterministic reductions of src/kernels/cuda executed by the emulator: the rmsnorm weight
// gradient and the bias column sums (column_sums.cuh), the embedding backward (owner-computes
// scan), and the attention through an AttentionPlan. "Deterministic" is checked as the GPU would
// break it: the result must be bitwise identical under the emulator's three thread interleavings
// (a reduction whose order depends on which thread gets there first differs between them) and
// between two runs, and the value must match a float64 reference (or the CPU kernel bitwise,
// where the kernel promises the CPU's order).
//
// Bound for the fp32 column sums: a chunk sums 64 terms in order, then the chunks are summed in
// order, so the rounding error is at most (64 + chunks) * 2^-24 * sum|term| (each term is itself
// one or two fp32 roundings of exact bf16 products, 2 * 2^-24 |term|): with 200 rows (4 chunks)
// this is < 5e-6 sum|term|; bound 1e-5 sum|term| + 1e-6.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "attention_harness.h"
#include "emu_block.h"
#include "emu_test_support.h"
#include "odc/kernels/cuda_attention.h"
#include "odc/kernels/cuda_gemm.h"
#include "odc/kernels/cuda_ops.h"
#include "odc/kernels/embedding.h"

namespace kc = odc::kernels::cuda;
using odc_emu::Schedule;
using odc_emu::UseSchedule;
using odc_emu_test::Bf16Data;
using odc_emu_test::from_bf16;
using odc_emu_test::random_bf16;

namespace {

constexpr Schedule kSchedules[] = {Schedule::round_robin, Schedule::warps_forward, Schedule::warps_backward};

template <typename T>
bool bitwise_equal(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// Elements of got outside 1e-5 * mag + 1e-6 of want (mag: the sum of the terms' magnitudes).
int outside_sum_bound(const std::vector<float>& got, const std::vector<double>& want, const std::vector<double>& mag) {
  int bad = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (!(std::fabs(got[i] - want[i]) <= 1e-5 * mag[i] + 1e-6)) {
      if (bad == 0) UNSCOPED_INFO("first outside the bound at " << i << ": " << got[i] << " vs " << want[i]);
      ++bad;
    }
  }
  return bad;
}

}  // namespace

TEST_CASE("emu deterministic: rmsnorm dweight is bitwise fixed over interleavings, runs and workspaces",
          "[emu][deterministic]") {
  const std::int64_t rows = 200, dim = 300;  // 4 row chunks (the last partial), 2 column blocks
  const Bf16Data x = random_bf16(rows * dim, 2.0f, 61), w = random_bf16(dim, 1.0f, 62),
                 dy = random_bf16(rows * dim, 1.0f, 63);
  std::vector<std::uint16_t> y(rows * dim);
  std::vector<float> rstd(rows);
  kc::rmsnorm_forward(x.bits.data(), w.bits.data(), y.data(), rstd.data(), rows, dim, 1e-5, nullptr);
  kc::DeviceAllocator allocator;
  std::vector<std::vector<float>> dweights;
  std::vector<std::vector<std::uint16_t>> dxs;
  for (const Schedule s : kSchedules) {
    const UseSchedule use(s);
    for (int run = 0; run < 2; ++run) {
      std::vector<float> dw(dim, 0.5f);
      std::vector<std::uint16_t> dx(rows * dim);
      kc::rmsnorm_backward(dy.bits.data(), x.bits.data(), w.bits.data(), rstd.data(), dx.data(), dw.data(), rows,
                           dim, false, allocator, nullptr);
      dweights.push_back(dw);
      dxs.push_back(dx);
    }
  }
  // The caller-provided workspace gives the same bits as the allocator's scratch.
  std::vector<float> workspace(kc::rmsnorm_backward_workspace_bytes(rows, dim) / sizeof(float));
  CHECK(workspace.size() == static_cast<std::size_t>(4 * dim));
  std::vector<float> dw_ws(dim, 0.5f);
  std::vector<std::uint16_t> dx_ws(rows * dim);
  kc::rmsnorm_backward(dy.bits.data(), x.bits.data(), w.bits.data(), rstd.data(), dx_ws.data(), dw_ws.data(), rows,
                       dim, false, workspace.data(), nullptr);
  dweights.push_back(dw_ws);
  dxs.push_back(dx_ws);
  for (std::size_t i = 1; i < dweights.size(); ++i) {
    INFO("variant " << i);
    CHECK(bitwise_equal(dweights[i], dweights[0]));
    CHECK(bitwise_equal(dxs[i], dxs[0]));
  }
  // The value: sum over rows of dy * x * rstd (rstd as the kernel stored it), float64.
  std::vector<double> ref(dim, 0.5), mag(dim, 0.5);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t i = 0; i < dim; ++i) {
      const double t = dy.values[r * dim + i] * x.values[r * dim + i] * rstd[r];
      ref[i] += t;
      mag[i] += std::fabs(t);
    }
  }
  CHECK(outside_sum_bound(dweights[0], ref, mag) == 0);
  // Every block went back to the pool: nothing is in use, the reserve is cached for reuse.
  const kc::AllocatorStats st = allocator.stats();
  CHECK(st.bytes_in_use == 0);
  CHECK(st.bytes_cached == st.bytes_reserved);
  CHECK(st.device_allocs == 1);
  CHECK(st.cache_hits == 5);
}

TEST_CASE("emu deterministic: bias column sums are bitwise fixed over interleavings and runs",
          "[emu][deterministic]") {
  const std::int64_t rows = 200, cols = 520;  // 4 chunks, 3 column blocks (the last partial)
  const Bf16Data dy = random_bf16(rows * cols, 1.0f, 71);
  kc::DeviceAllocator allocator;
  std::vector<std::vector<float>> sums;
  for (const Schedule s : kSchedules) {
    const UseSchedule use(s);
    for (int run = 0; run < 2; ++run) {
      std::vector<float> db(cols, -1.0f);
      kc::column_sums_accumulate(dy.bits.data(), db.data(), rows, cols, allocator, nullptr);
      sums.push_back(db);
    }
  }
  std::vector<float> workspace(kc::column_sums_workspace_bytes(rows, cols) / sizeof(float));
  CHECK(workspace.size() == static_cast<std::size_t>(4 * cols));
  std::vector<float> db_ws(cols, -1.0f);
  kc::column_sums_accumulate(dy.bits.data(), db_ws.data(), rows, cols, workspace.data(), nullptr);
  sums.push_back(db_ws);
  for (std::size_t i = 1; i < sums.size(); ++i) CHECK(bitwise_equal(sums[i], sums[0]));
  std::vector<double> ref(cols, -1.0), mag(cols, 1.0);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      ref[c] += dy.values[r * cols + c];
      mag[c] += std::fabs(dy.values[r * cols + c]);
    }
  }
  CHECK(outside_sum_bound(sums[0], ref, mag) == 0);
}

TEST_CASE("emu deterministic: embedding backward equals the CPU kernel bitwise (frequent id, ragged dim)",
          "[emu][deterministic]") {
  for (const std::int64_t dim : {72, 40, 2048 + 17}) {  // not multiples of 32; a wide one
    const std::int64_t vocab = 97, tokens = dim > 1000 ? 40 : 500;
    const Bf16Data dout = random_bf16(tokens * dim, 1.0f, 81);
    std::vector<std::int32_t> ids(tokens);
    // Half the tokens are id 5 (a very frequent id: one long serial run), the rest spread, with
    // the largest id present.
    for (std::int64_t t = 0; t < tokens; ++t) {
      ids[t] = t % 2 == 0 ? 5 : static_cast<std::int32_t>((t * 37 + t / 7) % vocab);
    }
    ids[tokens - 1] = static_cast<std::int32_t>(vocab - 1);
    const Bf16Data init = random_bf16(vocab * dim, 0.5f, 82);
    std::vector<float> cpu(init.values.begin(), init.values.end());
    const std::vector<float> dout_f(dout.values.begin(), dout.values.end());
    odc::kernels::cpu::embedding_backward<float>(ids.data(), dout_f.data(), cpu.data(), tokens, dim);
    for (const Schedule s : kSchedules) {
      const UseSchedule use(s);
      std::vector<float> gpu(init.values.begin(), init.values.end());
      kc::embedding_backward(ids.data(), dout.bits.data(), gpu.data(), tokens, dim, nullptr);
      INFO("dim " << dim << " schedule " << static_cast<int>(s));
      CHECK(bitwise_equal(gpu, cpu));
    }
  }
}

TEST_CASE("emu deterministic: an AttentionPlan built once serves two layers, bitwise as the per-call path",
          "[emu][deterministic][attention]") {
  const std::vector<std::int32_t> cu = {0, 37, 37, 166, 230};  // an empty sequence; 129 = 128 + 1
  const int heads = 4, kv = 2, d = 64;
  const std::int64_t T = cu.back();
  const std::size_t nq = static_cast<std::size_t>(T * heads * d), nkv = static_cast<std::size_t>(T * kv * d);
  kc::CudaAttentionShape shape;
  shape.cu_seqlens = cu.data();
  shape.num_seqs = static_cast<int>(cu.size()) - 1;
  shape.tokens = T;
  shape.n_heads = heads;
  shape.n_kv_heads = kv;
  shape.head_dim = d;
  kc::DeviceAllocator allocator;
  kc::Stream stream;
  kc::AttentionPlan plan(shape, allocator, stream.handle());
  REQUIRE(plan.built());
  CHECK(plan.shape().cu_seqlens != cu.data());  // its own copy
  CHECK(plan.forward_tiles() > 0);
  CHECK(plan.dq_tiles() > 0);
  CHECK(plan.dkv_tiles() > 0);

  struct Outputs {
    std::vector<std::uint16_t> out, dq, dk, dv;
    std::vector<float> lse;
  };
  const auto run = [&](std::uint32_t seed, const kc::AttentionPlan* p) {
    const Bf16Data q = random_bf16(nq, 1.0f, seed), k = random_bf16(nkv, 1.0f, seed + 1),
                   v = random_bf16(nkv, 1.0f, seed + 2), dout = random_bf16(nq, 1.0f, seed + 3);
    Outputs o{std::vector<std::uint16_t>(nq), std::vector<std::uint16_t>(nq), std::vector<std::uint16_t>(nkv),
              std::vector<std::uint16_t>(nkv), std::vector<float>(static_cast<std::size_t>(T * heads))};
    if (p != nullptr) {
      kc::attention_forward(*p, q.bits.data(), k.bits.data(), v.bits.data(), o.out.data(), o.lse.data(),
                            stream.handle());
      kc::attention_backward(*p, q.bits.data(), k.bits.data(), v.bits.data(), o.out.data(), o.lse.data(),
                             dout.bits.data(), o.dq.data(), o.dk.data(), o.dv.data(), allocator, stream.handle());
    } else {
      kc::attention_forward(shape, q.bits.data(), k.bits.data(), v.bits.data(), o.out.data(), o.lse.data(),
                            allocator, stream.handle());
      kc::attention_backward(shape, q.bits.data(), k.bits.data(), v.bits.data(), o.out.data(), o.lse.data(),
                             dout.bits.data(), o.dq.data(), o.dk.data(), o.dv.data(), allocator, stream.handle());
    }
    return o;
  };
  // Two "layers" (different inputs) on the one plan, forward and backward, then the per-call path.
  const Outputs layer0 = run(91, &plan), layer1 = run(95, &plan);
  stream.synchronize();
  const Outputs ref0 = run(91, nullptr), ref1 = run(95, nullptr);
  for (const auto& [got, want] : {std::pair{&layer0, &ref0}, std::pair{&layer1, &ref1}}) {
    CHECK(bitwise_equal(got->out, want->out));
    CHECK(bitwise_equal(got->lse, want->lse));
    CHECK(bitwise_equal(got->dq, want->dq));
    CHECK(bitwise_equal(got->dk, want->dk));
    CHECK(bitwise_equal(got->dv, want->dv));
  }
  CHECK(!bitwise_equal(layer0.out, layer1.out));  // the layers did see different inputs
  // Rebuilt for the next microbatch (fewer tokens): still the per-call path's bits.
  const std::vector<std::int32_t> cu2 = {0, 65, 100};
  kc::CudaAttentionShape shape2 = shape;
  shape2.cu_seqlens = cu2.data();
  shape2.num_seqs = 2;
  shape2.tokens = 100;
  plan.build(shape2, allocator, stream.handle());
  CHECK(plan.shape().tokens == 100);
  const std::size_t nq2 = static_cast<std::size_t>(100 * heads * d), nkv2 = static_cast<std::size_t>(100 * kv * d);
  const Bf16Data q = random_bf16(nq2, 1.0f, 7), k = random_bf16(nkv2, 1.0f, 8), v = random_bf16(nkv2, 1.0f, 9);
  std::vector<std::uint16_t> o_plan(nq2), o_call(nq2);
  std::vector<float> l_plan(100 * heads), l_call(100 * heads);
  kc::attention_forward(plan, q.bits.data(), k.bits.data(), v.bits.data(), o_plan.data(), l_plan.data(),
                        stream.handle());
  kc::attention_forward(shape2, q.bits.data(), k.bits.data(), v.bits.data(), o_call.data(), l_call.data(),
                        allocator, stream.handle());
  CHECK(bitwise_equal(o_plan, o_call));
  CHECK(bitwise_equal(l_plan, l_call));
}
