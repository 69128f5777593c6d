// CpuBackend and its buffers: views carry dtype and device and the ops refuse mismatches; buffers
// grow only; uploads alias host memory; row gather/scatter and the loss sums are exact; the peak
// and the device description name the cores' FMA peak and the GEMM path.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "odc/backend/cpu_backend.h"
#include "odc/core/cpu_features.h"
#include "odc/core/error.h"
#include "odc/kernels/cross_entropy.h"
#include "odc/kernels/matmul.h"

using namespace odc;
using backend::ConstView;
using backend::View;

TEST_CASE("backend buffers grow only, zero-filled, and hand out typed host views", "[backend]") {
  backend::CpuBackend b(1);
  backend::Buffer buffer(b.memory(), DType::f32);
  CHECK(buffer.capacity_bytes() == 0);
  const View small = buffer.get(10);
  CHECK(small.count == 10);
  CHECK(small.dtype == DType::f32);
  CHECK(small.device == Device::cpu());
  const auto* zeros = static_cast<const float*>(small.data);
  for (int i = 0; i < 10; ++i) CHECK(zeros[i] == 0.0f);
  static_cast<float*>(small.data)[3] = 7.0f;
  // Within the capacity: the same memory, contents kept.
  const View again = buffer.get(4);
  CHECK(again.data == small.data);
  CHECK(static_cast<const float*>(again.data)[3] == 7.0f);
  CHECK(buffer.capacity_bytes() == 40);
  buffer.get(1000);
  CHECK(buffer.capacity_bytes() == 4000);
  buffer.get(10);
  CHECK(buffer.capacity_bytes() == 4000);
  CHECK_THROWS_WITH(small.at(8, 3), Catch::Contains("view [8, 11) outside a buffer of 10 elements"));
  CHECK(small.at(2, 5).data == static_cast<float*>(small.data) + 2);
}

TEST_CASE("host buffers of any size are zero-filled, mapped ones included, and survive regrowth", "[backend]") {
  backend::CpuBackend b(1);
  backend::Buffer buffer(b.memory(), DType::f32);
  for (const std::int64_t n : {std::int64_t{100}, std::int64_t{1} << 20, std::int64_t{3} << 20}) {  // heap, mapped
    const View v = buffer.get(n);
    const auto* data = static_cast<const float*>(v.data);
    std::int64_t nonzero = 0;
    for (std::int64_t i = 0; i < n; ++i) nonzero += data[i] != 0.0f;
    CHECK(nonzero == 0);
    std::fill_n(static_cast<float*>(v.data), n, 1.0f);  // dirty it before the next growth
  }
}

TEST_CASE("linear_forward_residual is copy + linear_forward_add, in place or not", "[backend]") {
  backend::CpuBackend b(1);
  const std::int64_t rows = 5, in = 7, out = 6;
  std::vector<float> x(rows * in), w(out * in), residual(rows * out);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.3 * static_cast<double>(i));
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = std::cos(0.7 * static_cast<double>(i));
  for (std::size_t i = 0; i < residual.size(); ++i) residual[i] = 0.1f * static_cast<float>(i);
  const auto cv = [](const std::vector<float>& v) { return ConstView{v.data(), DType::f32, Device::cpu(), static_cast<std::int64_t>(v.size())}; };
  const auto mv = [](std::vector<float>& v) { return View{v.data(), DType::f32, Device::cpu(), static_cast<std::int64_t>(v.size())}; };
  std::vector<float> added = residual;
  b.linear_forward_add(cv(x), cv(w), mv(added), rows, in, out);
  std::vector<float> y(rows * out, NAN);
  const std::vector<float> before = residual;
  b.linear_forward_residual(cv(x), cv(w), cv(residual), mv(y), rows, in, out);
  CHECK(y == added);
  CHECK(residual == before);
  b.linear_forward_residual(cv(x), cv(w), cv(residual), mv(residual), rows, in, out);  // in place
  CHECK(residual == added);
}

TEST_CASE("the CPU backend refuses views of another dtype or device", "[backend]") {
  backend::CpuBackend b(1);
  backend::Buffer ids(b.memory(), DType::i32), out(b.memory(), DType::f32);
  const View wrong = ids.get(4);
  CHECK_THROWS_WITH(b.zero(View{wrong.data, DType::f32, Device::cuda(0), 4}), Catch::Contains("view of device memory"));
  CHECK_THROWS_WITH(b.swiglu_forward(wrong, out.get(2), 1, 2), Catch::Contains("got a int32 view for float32"));
  CHECK_THROWS_WITH(b.copy(ids.get(4), out.get(4)), Catch::Contains("copy of 4 int32 into 4 float32"));
}

TEST_CASE("CPU uploads alias host memory, downloads copy", "[backend]") {
  backend::CpuBackend b(1);
  backend::Buffer staging(b.memory(), DType::i32);
  const std::vector<std::int32_t> host = {5, 6, 7};
  const ConstView v = b.upload(std::span<const std::int32_t>(host), staging);
  CHECK(v.data == host.data());
  CHECK(v.count == 3);
  CHECK(v.dtype == DType::i32);
  CHECK(staging.capacity_bytes() == 0);
  backend::Buffer floats(b.memory(), DType::f32);
  const View f = floats.get(3);
  static_cast<float*>(f.data)[1] = 2.5f;
  std::vector<float> back(3, -1.0f);
  b.download(f, back);
  CHECK(back == std::vector<float>{0.0f, 2.5f, 0.0f});
}

TEST_CASE("row gather and scatter move whole rows by index", "[backend]") {
  backend::CpuBackend b(1);
  backend::Buffer src(b.memory(), DType::f32), dst(b.memory(), DType::f32), back(b.memory(), DType::f32);
  backend::Buffer staging(b.memory(), DType::i32);
  const View s = src.get(4 * 3);
  for (int i = 0; i < 12; ++i) static_cast<float*>(s.data)[i] = static_cast<float>(i);
  const std::vector<std::int32_t> rows = {3, 1};
  const ConstView r = b.upload(std::span<const std::int32_t>(rows), staging);
  const View d = dst.get(2 * 3);
  b.gather_rows(s, r, 3, d);
  const auto* g = static_cast<const float*>(d.data);
  CHECK(std::vector<float>(g, g + 6) == std::vector<float>{9, 10, 11, 3, 4, 5});
  const View t = back.get(4 * 3);
  b.scatter_rows(d, r, 3, t);
  const auto* sc = static_cast<const float*>(t.data);
  CHECK(std::vector<float>(sc, sc + 12) == std::vector<float>{0, 0, 0, 3, 4, 5, 0, 0, 0, 9, 10, 11});
}

TEST_CASE("cross_entropy adds each chunk's weighted loss and per-row losses in order", "[backend]") {
  backend::CpuBackend b(1);
  const std::int64_t rows = 3, vocab = 5;
  std::vector<float> logits = {0.1f, 2.0f, -1.0f, 0.5f, 0.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, -2.0f, 0.0f, 3.0f, 0.2f, 0.1f};
  const std::vector<std::int32_t> targets = {1, 4, 2};
  const std::vector<float> weights = {0.5f, 0.0f, 0.25f};
  // The kernel directly, for the expected values.
  std::vector<float> nll_ref(3);
  const double loss_ref = kernels::cpu::cross_entropy_forward_backward<float>(
      logits.data(), targets.data(), weights.data(), rows, vocab, static_cast<float*>(nullptr), nll_ref.data());
  backend::Buffer staging_i(b.memory(), DType::i32), staging_f(b.memory(), DType::f32), nll(b.memory(), DType::f32);
  backend::LossSums sums{1.0, 2.0};  // a running sum from earlier chunks
  b.cross_entropy(ConstView{logits.data(), DType::f32, Device::cpu(), rows * vocab},
                  b.upload(std::span<const std::int32_t>(targets), staging_i),
                  b.upload(std::span<const float>(weights), staging_f), rows, vocab, View{}, nll.get(rows), sums);
  CHECK(sums.weighted == 1.0 + loss_ref);
  CHECK(nll_ref[1] == 0.0f);  // a weight-0 row counts 0
  CHECK(sums.nll == ((2.0 + nll_ref[0]) + nll_ref[1]) + nll_ref[2]);
  CHECK(loss_ref > 0.0);
}

TEST_CASE("the CPU backend's peak is its cores' FMA peak, beside a measured GEMM rate", "[backend][peak]") {
  backend::CpuBackend b(2);
  CHECK(b.threads() == 2);
  const backend::PeakFlops peak = b.measure_peak_flops();
  CHECK(std::isfinite(peak.device));
  CHECK(peak.device > 2e9);  // > 1 GFLOP/s per core: any core, even on a loaded machine
  CHECK(std::isfinite(peak.gemm));
  CHECK(peak.gemm > 0.0);
  CHECK(peak.source.find("FMA loop") != std::string::npos);
  CHECK(peak.source.find("x 2 thread") != std::string::npos);

  const backend::DeviceDescription d = b.describe();
  const CpuFeatures cpu = detect_cpu_features();
  CHECK(d.text.rfind("cpu: ", 0) == 0);
  CHECK(d.text.find(cpu.describe()) != std::string::npos);
  CHECK(d.text.find("GEMM " + kernels::cpu::gemm_info().library) != std::string::npos);
  // A warning only when both ISAs are known and the GEMM's fp32 vector width is below the CPU's (by
  // name alone, avx512_core_bf16 GEMMs on an avx512_core_fp16 CPU would look slow; they are not).
  const int gemm_level = fp32_vector_level(kernels::cpu::gemm_info().isa), cpu_level = fp32_vector_level(cpu.isa);
  CHECK(d.warning.empty() == !(gemm_level >= 0 && cpu_level >= 0 && gemm_level < cpu_level));
}
