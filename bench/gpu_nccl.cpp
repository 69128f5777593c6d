// gpu_nccl: what NCCL's collectives cost on unit-sized buffers, on one GPU and one rank, next to a
// plain device-to-device copy of the same bytes: the floor under NcclComm's gathers and pushes
// (with one rank an all-gather or reduce-scatter moves the local shard only, so a result far
// below the copy is NCCL's overhead, not the wire).
//
//   gpu_nccl [--iters N] [--warmup N] [--mib N1,N2,...]     (default: --mib 64,256)
//
// One JSON line per measurement, `bytes` the fp32 unit buffer and `gbps` those bytes per second
// (algorithm bandwidth: a copy's read + write count once here, unlike gpu_ceilings):
//   {"bench":"gpu_nccl","op":"device_copy","ranks":1,"bytes":...,"ms":...,"gbps":...}
//   {"bench":"gpu_nccl","op":"all_gather","dtype":"fp32"|"bf16",...,"vs_copy":...}
//   {"bench":"gpu_nccl","op":"reduce_scatter","dtype":"fp32",...,"vs_copy":...}
// where all_gather bf16 is NcclComm's bf16 path: half the bytes gathered, widened to fp32 after
// (cast_bf16_to_f32), and vs_copy = copy time / op time. Exits 77 without a device, 2 on a usage
// error, 1 on a NCCL or CUDA failure.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu_main.h"
#include "gpu_timing.h"
#include "odc/core/error.h"
#include "odc/kernels/cuda_cast.h"
#include "odc/kernels/cuda_device.h"

namespace {

namespace cu = odc::kernels::cuda;

constexpr const char* kUsage = "usage: gpu_nccl [--iters N] [--warmup N] [--mib N1,N2,...]\n";

struct Options {
  int iters = 20;
  int warmup = 3;
  std::vector<std::int64_t> mib;
};

Options parse(int argc, char** argv) {
  using odc::Range;
  const odc::cli::Command command{"gpu_nccl", kUsage, {{"--iters"}, {"--warmup"}, {"--mib"}}};
  const auto args = odc::cli::parse(command, argc, argv);
  Options o;
  o.iters = static_cast<int>(args.integer("--iters", o.iters, Range::at_least(1).and_at_most(1 << 20)));
  o.warmup = static_cast<int>(args.integer("--warmup", o.warmup, Range::at_least(1).and_at_most(1 << 20)));
  o.mib = args.integer_list("--mib", {64, 256}, Range::at_least(1).and_at_most(1 << 20));
  return o;
}

void check_nccl(ncclResult_t result, const char* what) {
  if (result != ncclSuccess) {
    odc::fail("{} failed: {} ({})", what, ncclGetErrorString(result), ncclGetLastError(nullptr));
  }
}

// One rank's communicator on device 0.
class OneRankComm {
 public:
  OneRankComm() {
    const int device = 0;
    check_nccl(ncclCommInitAll(&comm_, 1, &device), "ncclCommInitAll");
  }
  ~OneRankComm() { ncclCommDestroy(comm_); }
  OneRankComm(const OneRankComm&) = delete;
  OneRankComm& operator=(const OneRankComm&) = delete;
  ncclComm_t get() const { return comm_; }

 private:
  ncclComm_t comm_ = nullptr;
};

void print(const char* op, const char* dtype, std::size_t bytes, double ms, double copy_ms) {
  nlohmann::json line = {{"bench", "gpu_nccl"}, {"op", op}, {"ranks", 1}, {"bytes", bytes}, {"ms", ms},
                         {"gbps", static_cast<double>(bytes) / (ms * 1e-3) / 1e9}};
  if (dtype != nullptr) {
    line["dtype"] = dtype;
    line["vs_copy"] = copy_ms / ms;
  }
  std::printf("%s\n", line.dump().c_str());
  std::fflush(stdout);
}

void measure(const Options& o, std::int64_t mib, const OneRankComm& comm, cu::DeviceAllocator& alloc,
             const cu::Stream& stream) {
  const auto bytes = static_cast<std::size_t>(mib) << 20;
  const std::size_t floats = bytes / sizeof(float);
  // `half`: the bf16 shard gathered into `staged` (as NcclComm's bf16 shadow and staging buffer).
  cu::DeviceBuffer in(alloc, bytes, stream), out(alloc, bytes, stream), half(alloc, bytes / 2, stream),
      staged(alloc, bytes / 2, stream);
  cu::memset_async(in.get(), 1, bytes, stream.handle());
  cu::memset_async(half.get(), 1, bytes / 2, stream.handle());
  auto* s = static_cast<cudaStream_t>(stream.handle());
  const auto time = [&](auto&& fn) { return odc::bench::gpu_time_ms(o.warmup, o.iters, stream, fn); };

  const double copy_ms = time([&] { cu::copy_device_async(out.get(), in.get(), bytes, stream.handle()); });
  print("device_copy", nullptr, bytes, copy_ms, copy_ms);
  print("all_gather", "fp32", bytes,
        time([&] {
          check_nccl(ncclAllGather(in.get(), out.get(), floats, ncclFloat32, comm.get(), s), "ncclAllGather");
        }),
        copy_ms);
  print("all_gather", "bf16", bytes, time([&] {
          check_nccl(ncclAllGather(half.get(), staged.get(), floats, ncclBfloat16, comm.get(), s), "ncclAllGather");
          cu::cast_bf16_to_f32(staged.as<std::uint16_t>(), out.as<float>(),
                               static_cast<std::int64_t>(floats), stream.handle());
        }),
        copy_ms);
  print("reduce_scatter", "fp32", bytes, time([&] {
          check_nccl(ncclReduceScatter(in.get(), out.get(), floats, ncclFloat32, ncclSum, comm.get(), s),
                     "ncclReduceScatter");
        }),
        copy_ms);
}

}  // namespace

int main(int argc, char** argv) {
  return odc::bench::gpu_bench_main("gpu_nccl", [&] { return parse(argc, argv); }, [](const Options& o) {
    cu::set_device(0);
    cu::DeviceAllocator alloc;
    const cu::Stream stream;
    const OneRankComm comm;
    for (const std::int64_t mib : o.mib) measure(o, mib, comm, alloc, stream);
  });
}
