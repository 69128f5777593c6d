// The CUDA backend's op timeline (CudaBackend::make_timeline: events on its stream) and the op
// profiler over it, on a GPU (the runner skips without one). What is checked is consistency, not
// speed: a mark waits for nothing (placed behind ~0.1 s of queued GEMMs it returns at once, and
// the interval it closes spans that work); intervals add up (a..c = a..b + b..c, within the
// events' resolution of about a microsecond, 2 us allowed per sum); and an idle device between
// two ops (the host sleeping 50 ms) is charged to no op: the ops' time stays far below the
// window's wall time, the gap being what ProfileDocument::table reports outside ops.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

#include "odc/backend/cuda_backend.h"
#include "odc/backend/op_profiler.h"

using namespace odc;

namespace {

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("the CUDA op timeline marks without waiting and its intervals add up", "[cuda][profile]") {
  backend::CudaBackend b(0);
  constexpr std::int64_t n = 4096;
  backend::Buffer x(b.memory(), DType::bf16), w(b.memory(), DType::bf16), y(b.memory(), DType::bf16);
  const backend::View vx = x.get(n * n), vw = w.get(n * n), vy = y.get(n * n);
  const auto gemm = [&] { b.linear_forward(vx, vw, backend::ConstView{}, vy, n, n, n); };
  gemm();  // the heuristic query and the first launch
  b.synchronize();
  auto timeline = b.make_timeline();
  const std::size_t start = timeline->mark();
  for (int i = 0; i < 600; ++i) gemm();  // 600 x 137 GFLOP: ~0.1 s on an H100
  const auto t0 = std::chrono::steady_clock::now();
  const std::size_t middle = timeline->mark();
  const double mark_seconds = since(t0);
  for (int i = 0; i < 10; ++i) gemm();
  const std::size_t end = timeline->mark();
  const double queued = timeline->seconds(start, middle);
  std::printf("[cuda-profile] mark behind %.1f ms of queued GEMMs returned in %.3f ms\n", queued * 1e3,
              mark_seconds * 1e3);
  CHECK(mark_seconds < 0.1 * queued);
  const double ab = timeline->seconds(start, middle), bc = timeline->seconds(middle, end);
  CHECK(timeline->seconds(start, end) == Approx(ab + bc).margin(2e-6));
  CHECK(bc > 0);
  // Reset: the same events serve the next marks.
  timeline->reset();
  CHECK(timeline->mark() == 0);
  gemm();
  CHECK(timeline->seconds(0, timeline->mark()) > 0);
}

TEST_CASE("an idle GPU between ops is charged to no op", "[cuda][profile]") {
  backend::ProfilingBackend p(std::make_unique<backend::CudaBackend>(0));
  backend::Buffer big(p.memory(), DType::f32);
  const backend::View v = big.get(std::int64_t{64} << 20);  // 256 MiB: ~0.1 ms to zero
  p.zero(v);
  p.synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  p.start();
  p.zero(v);
  p.synchronize();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  p.zero(v);
  p.synchronize();
  const double wall = since(t0);
  const backend::OpProfile profile = p.stop();
  REQUIRE(profile.ops.size() == 1);
  CHECK(profile.ops[0].calls == 2);
  std::printf("[cuda-profile] two zeroings of 256 MiB: %.3f ms of a %.1f ms window\n", profile.seconds() * 1e3,
              wall * 1e3);
  CHECK(profile.seconds() > 0);
  CHECK(profile.seconds() < 0.02);  // the 50 ms of idle device outside both ops
  CHECK(wall >= 0.05);
}
