// make_backend: the one place a backend is chosen, with clear errors naming model.device /
// model.dtype; and the Backend interface's defaults (the host kernels), which keep the CPU path
// exactly what it was.
#include <cmath>
#include <vector>

#include <catch2/catch.hpp>

#include "odc/backend/backend_factory.h"
#include "odc/backend/cpu_backend.h"
#include "odc/core/error.h"
#include "odc/kernels/adamw.h"

using namespace odc;
using backend::ConstView;
using backend::View;

TEST_CASE("make_backend builds the CPU backend for cpu/float32", "[backend]") {
  const auto b = backend::make_backend("cpu", DType::f32, 1);
  REQUIRE(b != nullptr);
  CHECK(b->name() == "cpu");
  CHECK(b->activation_dtype() == DType::f32);
  CHECK(b->device() == Device::cpu());
}

TEST_CASE("make_backend gives the CPU backend's bf16 mode for model.dtype bfloat16", "[backend]") {
  const auto b = backend::make_backend("cpu", DType::bf16, 1);
  REQUIRE(b != nullptr);
  CHECK(b->name() == "cpu-bf16");
  CHECK(b->device() == Device::cpu());
  // The compute copy of a unit is rounded to bf16: 1 + 2^-10 is not a bf16 value, 1 is.
  const float unit[2] = {1.0f + 1.0f / 1024.0f, 3.0f};
  const ConstView w = b->weights(unit, 2);
  CHECK(w.data != unit);
  CHECK(static_cast<const float*>(w.data)[0] == 1.0f);
  CHECK(static_cast<const float*>(w.data)[1] == 3.0f);
  b->release_weights(unit);
  CHECK_THROWS_WITH(backend::make_backend("cpu", DType::f16, 1), Catch::Contains("model.dtype=f"));
}

TEST_CASE("make_backend refuses what it cannot build, naming the key", "[backend]") {
  CHECK_THROWS_WITH(backend::make_backend("tpu", DType::f32, 1),
                    Catch::Contains("model.device: unknown device 'tpu'") && Catch::Contains("cpu or cuda"));
  CHECK_THROWS_WITH(backend::make_backend("cuda", DType::f32, 1),
                    Catch::Contains("model.dtype=float32 on model.device=cuda") &&
                        Catch::Contains("set model.dtype: bfloat16"));
  if (!backend::cuda_backend_built()) {
    CHECK_THROWS_WITH(backend::make_backend("cuda", DType::bf16, 1),
                      Catch::Contains("model.device=cuda: this build has no CUDA backend"));
  } else {
    // A CUDA build: either a GPU is visible, or the error says there is none.
    try {
      const auto b = backend::make_backend("cuda", DType::bf16, 1);
      CHECK(b->name() == "cuda");
      CHECK(b->activation_dtype() == DType::bf16);
    } catch (const Error& e) {
      CHECK_THAT(e.what(), Catch::Contains("model.device=cuda: no usable CUDA device"));
    }
  }
}

TEST_CASE("Backend defaults: sum_of_squares is the double-accumulated host sum", "[backend]") {
  backend::CpuBackend b(1);
  backend::Buffer buffer(b.memory(), DType::f32);
  const View x = buffer.get(1001);
  auto* data = static_cast<float*>(x.data);
  double reference = 0.0;
  for (int i = 0; i < 1001; ++i) {
    data[i] = static_cast<float>(std::sin(0.37 * i) * (1.0 + i % 7));
    reference += static_cast<double>(data[i]) * static_cast<double>(data[i]);
  }
  // Double accumulation of fp32 squares: the result agrees with a plain double loop to a few ulps
  // of a double (the summation order may differ); 1e-12 relative is far tighter than float.
  CHECK(std::abs(b.sum_of_squares(x) - reference) <= 1e-12 * reference);
  CHECK(b.sum_of_squares(x.at(0, 0)) == 0.0);
  CHECK_THROWS_WITH(b.sum_of_squares(ConstView{data, DType::f32, Device::cuda(0), 4}),
                    Catch::Contains("view of device memory"));
}

TEST_CASE("Backend defaults: adamw_step is the host kernel per segment, decay only where marked", "[backend]") {
  backend::CpuBackend b(1);
  constexpr int n = 40;
  std::vector<float> p(n), g(n), m(n, 0.0f), v(n, 0.0f);
  for (int i = 0; i < n; ++i) {
    p[i] = 0.1f * static_cast<float>(i % 9) - 0.4f;
    g[i] = 0.05f * static_cast<float>((i * 5) % 11) - 0.25f;
  }
  auto reference_p = p, reference_m = m, reference_v = v;
  kernels::AdamWParams params;
  params.lr = 0.01;
  params.weight_decay = 0.1;
  params.step = 1;
  params.grad_scale = 0.5;
  // Segments [0, 25) decayed and [25, 40) not, as ShardLayout's decay segments.
  auto view = [](std::vector<float>& h, int at, int count) { return View{h.data() + at, DType::f32, Device::cpu(), count}; };
  const std::vector<backend::AdamWSegment> segments = {
      {view(p, 0, 25), view(g, 0, 25), view(m, 0, 25), view(v, 0, 25), true},
      {view(p, 25, 15), view(g, 25, 15), view(m, 25, 15), view(v, 25, 15), false}};
  b.adamw_step(segments, params);
  kernels::cpu::adamw_step(reference_p.data(), g.data(), reference_m.data(), reference_v.data(), 25, params);
  kernels::AdamWParams no_decay = params;
  no_decay.weight_decay = 0.0;
  kernels::cpu::adamw_step(reference_p.data() + 25, g.data() + 25, reference_m.data() + 25, reference_v.data() + 25, 15,
                           no_decay);
  // The same kernel on the same data: bit for bit.
  CHECK(p == reference_p);
  CHECK(m == reference_m);
  CHECK(v == reference_v);
}

TEST_CASE("Backend defaults: the head's chunking and loss hooks are the CPU path's", "[backend]") {
  backend::CpuBackend b(1);
  // The model's former rule: 4 Mi logits per chunk, clamped to [16, 2048] rows.
  CHECK(b.head_chunk_rows(64) == 2048);
  CHECK(b.head_chunk_rows(32000) == (std::int64_t{4} << 20) / 32000);
  CHECK(b.head_chunk_rows(1'000'000) == 16);
  backend::LossSums sums{1.5, 2.5};
  b.resolve_loss(sums);  // the CPU adds in cross_entropy itself: nothing pending
  CHECK(sums.weighted == 1.5);
  CHECK(sums.nll == 2.5);
  b.prepare_microbatch(backend::AttentionShape{});
  b.synchronize();
}
