// gpu_ceilings: what this GPU can do at best, as the denominators of our MFU and bandwidth
// figures: the cuBLASLt bf16 GEMM rate on a large square product (fp32 accumulation, the
// precision of our linear layers) and the device-to-device copy bandwidth.
//
//   gpu_ceilings [--size N] [--iters N] [--warmup N] [--copy-mib N]
//
// One JSON line per measurement:
//   {"bench":"gpu_ceilings","op":"gemm_bf16","m":N,"n":N,"k":N,"ms":...,"tflops":...}
//   {"bench":"gpu_ceilings","op":"device_copy","bytes":...,"ms":...,"gbps":...}
// where gbps counts bytes read plus bytes written (as PyTorch's and nvbandwidth's copy figures
// do). Random normal bf16 operands: products of zeros run faster than real data on Hopper. Exits
// 77 without a device, 2 on a usage error.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu_main.h"
#include "gpu_timing.h"
#include "odc/core/dtype.h"
#include "odc/core/error.h"
#include "odc/kernels/cuda_cast.h"
#include "odc/kernels/cuda_device.h"
#include "odc/kernels/cuda_gemm.h"

namespace {

namespace cu = odc::kernels::cuda;

struct Options {
  std::int64_t size = 8192;
  int iters = 10;
  int warmup = 3;
  std::int64_t copy_mib = 2048;
};

constexpr const char* kUsage = "usage: gpu_ceilings [--size N] [--iters N] [--warmup N] [--copy-mib N]\n";

Options parse(int argc, char** argv) {
  using odc::Range;
  const odc::cli::Command command{"gpu_ceilings", kUsage, {{"--size"}, {"--iters"}, {"--warmup"}, {"--copy-mib"}}};
  const auto args = odc::cli::parse(command, argc, argv);
  Options o;
  o.size = args.integer("--size", o.size, Range::at_least(16).and_at_most(32768));
  o.iters = static_cast<int>(args.integer("--iters", o.iters, Range::at_least(1).and_at_most(1 << 20)));
  o.warmup = static_cast<int>(args.integer("--warmup", o.warmup, Range::at_least(0).and_at_most(1 << 20)));
  o.copy_mib = args.integer("--copy-mib", o.copy_mib, Range::at_least(1).and_at_most(1 << 20));
  return o;
}

template <typename Fn>
double time_ms(const Options& o, const cu::Stream& stream, Fn&& fn) {
  return odc::bench::gpu_time_ms(o.warmup, o.iters, stream, fn);
}

void gemm_ceiling(const Options& o, cu::DeviceAllocator& alloc, const cu::Stream& stream) {
  const std::int64_t n = o.size;
  const auto elements = static_cast<std::size_t>(n * n);
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> host(elements);
  for (auto& v : host) v = dist(rng);
  cu::DeviceBuffer f32(alloc, elements * 4, stream);
  cu::copy_to_device_async(f32.get(), host.data(), elements * 4, stream.handle());
  cu::DeviceBuffer a(alloc, elements * 2, stream), b(alloc, elements * 2, stream), c(alloc, elements * 2, stream);
  cu::cast_f32_to_bf16(f32.as<float>(), a.as<std::uint16_t>(), static_cast<std::int64_t>(elements), stream.handle());
  cu::cast_f32_to_bf16(f32.as<float>(), b.as<std::uint16_t>(), static_cast<std::int64_t>(elements), stream.handle());
  stream.synchronize();
  cu::Blas blas;
  const double ms = time_ms(o, stream, [&] {
    cu::gemm(blas, false, true, n, n, n, 1.0f, a.as<std::uint16_t>(), n, b.as<std::uint16_t>(), n, 0.0f, c.get(), n,
             cu::GemmOut::bf16, stream.handle());
  });
  const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  const nlohmann::json line = {{"bench", "gpu_ceilings"}, {"op", "gemm_bf16"}, {"m", n}, {"n", n}, {"k", n},
                               {"ms", ms}, {"tflops", flops / (ms * 1e-3) / 1e12}};
  std::printf("%s\n", line.dump().c_str());
}

void copy_ceiling(const Options& o, cu::DeviceAllocator& alloc, const cu::Stream& stream) {
  const auto bytes = static_cast<std::size_t>(o.copy_mib) << 20;
  cu::DeviceBuffer src(alloc, bytes, stream), dst(alloc, bytes, stream);
  cu::memset_async(src.get(), 1, bytes, stream.handle());
  const double ms = time_ms(o, stream, [&] { cu::copy_device_async(dst.get(), src.get(), bytes, stream.handle()); });
  const nlohmann::json line = {{"bench", "gpu_ceilings"}, {"op", "device_copy"}, {"bytes", bytes}, {"ms", ms},
                               {"gbps", 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9}};
  std::printf("%s\n", line.dump().c_str());
}

}  // namespace

int main(int argc, char** argv) {
  return odc::bench::gpu_bench_main("gpu_ceilings", [&] { return parse(argc, argv); }, [](const Options& o) {
    cu::DeviceAllocator alloc;
    const cu::Stream stream;
    gemm_ceiling(o, alloc, stream);
    copy_ceiling(o, alloc, stream);
  });
}
