// PeerMemory over CUDA IPC (cuda_peer_memory.h).
#include "odc/distributed/transport/ipc/cuda_peer_memory.h"

#include <unistd.h>

#include <cinttypes>
#include <memory>
#include <cstdio>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <fmt/format.h>

#include "odc/core/error.h"
#include "odc/kernels/cuda_cast.h"
#include "odc/kernels/cuda_device.h"

namespace odc::distributed {

namespace {

namespace cu = kernels::cuda;

class CudaMark final : public LaneMark {
 public:
  cu::Event event;  // no timing: ordering only
};

int select_device(int device) {
  cu::set_device(device);
  return device;
}

struct CudaFree {
  void operator()(void* p) const noexcept { cudaFree(p); }
};
struct IpcClose {
  void operator()(void* p) const noexcept { cudaIpcCloseMemHandle(p); }
};

const CudaMark& as_cuda(const LaneMark& mark) { return static_cast<const CudaMark&>(mark); }

std::string to_hex(const void* data, std::size_t bytes) {
  std::string out;
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) out += fmt::format("{:02x}", p[i]);
  return out;
}

void from_hex(const std::string& hex, void* data, std::size_t bytes, std::string_view what) {
  if (hex.size() != 2 * bytes) fail("{}: a CUDA IPC handle of {} hex digits, expected {}", what, hex.size(), 2 * bytes);
  auto* p = static_cast<unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) p[i] = static_cast<unsigned char>(std::stoul(hex.substr(2 * i, 2), nullptr, 16));
}

class CudaPeerMemory final : public PeerMemory {
 public:
  explicit CudaPeerMemory(backend::Backend& backend)
      : device_(select_device(backend.device().index)),
        compute_(backend.native_stream()),
        backend_device_(backend.device()) {}

  ~CudaPeerMemory() override {
    // Nothing may still copy into or out of the regions (the comm synchronized its lanes).
    cudaSetDevice(device_);
    opened_.clear();
    exported_.clear();
  }

  Device device() const override { return backend_device_; }
  std::string_view name() const override { return "CUDA IPC"; }

  void* export_region(std::size_t bytes, std::string_view what, std::string& handle) override {
    // Plain cudaMalloc: CUDA IPC exports whole allocations of it (not pool allocations).
    const std::size_t size = bytes == 0 ? 256 : bytes;
    void* p = nullptr;
    const cudaError_t status = cudaMalloc(&p, size);
    if (status != cudaSuccess) {
      fail("{}: cannot allocate {} bytes on CUDA device {}: {}", what, size, device_, cudaGetErrorString(status));
    }
    exported_.emplace_back(p);
    // On the backend's (non-blocking) stream, which also uploads the master shards into these
    // regions: a legacy-stream cudaMemset would be unordered against that upload. Finished before the
    // handle is published, so no peer can read the region before it is zeroed.
    const auto stream = static_cast<cudaStream_t>(compute_);
    cu::check_cuda(cudaMemsetAsync(p, 0, size, stream), "cudaMemsetAsync of an exported region");
    cu::check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize after zeroing an exported region");
    cudaIpcMemHandle_t h{};
    cu::check_cuda(cudaIpcGetMemHandle(&h, p), "cudaIpcGetMemHandle");
    handle = fmt::format("cuda {} {:x} {} {}", ::getpid(), reinterpret_cast<std::uintptr_t>(p), size, to_hex(&h, sizeof(h)));
    return p;
  }

  void* open(const std::string& handle, std::string_view what) override {
    long long pid = 0;
    unsigned long long address = 0, size = 0;
    char hex[2 * sizeof(cudaIpcMemHandle_t) + 1] = {};
    if (std::sscanf(handle.c_str(), "cuda %lld %llx %llu %128s", &pid, &address, &size, hex) != 4) {
      fail("{}: '{}' is not a CUDA IPC handle (do all ranks keep their state on the GPU?)", what, handle);
    }
    if (pid == ::getpid()) return reinterpret_cast<void*>(static_cast<std::uintptr_t>(address));  // a rank of this process
    cudaIpcMemHandle_t h{};
    from_hex(hex, &h, sizeof(h), what);
    void* p = nullptr;
    const cudaError_t status = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
    if (status != cudaSuccess) {
      fail("{}: cudaIpcOpenMemHandle of process {}'s memory on CUDA device {}: {}", what, pid, device_,
           cudaGetErrorString(status));
    }
    opened_.emplace_back(p);
    return p;
  }

  void enter_thread() override { cu::set_device(device_); }

  void copy(Lane lane, void* dst, const void* src, std::size_t bytes) override {
    if (bytes == 0) return;
    cu::check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream(lane)), "cudaMemcpyAsync (IPC)");
  }
  void zero(Lane lane, void* dst, std::size_t bytes) override { cu::memset_async(dst, 0, bytes, stream(lane)); }
  void add(Lane lane, float* acc, const float* in, std::int64_t n) override {
    cu::add_f32(acc, in, n, stream(lane));
    cu::check_last_launch("add_f32 (gradient accumulation)");
  }
  void narrow(Lane lane, std::uint16_t* dst, const float* src, std::int64_t n) override {
    cu::cast_f32_to_bf16(src, dst, n, stream(lane));
    cu::check_last_launch("cast_f32_to_bf16 (bf16 shadow)");
  }
  void widen(Lane lane, float* dst, const std::uint16_t* src, std::int64_t n) override {
    cu::cast_bf16_to_f32(src, dst, n, stream(lane));
    cu::check_last_launch("cast_bf16_to_f32 (bf16 gather)");
  }

  std::unique_ptr<LaneMark> make_mark() override { return std::make_unique<CudaMark>(); }
  void record(LaneMark& mark, Lane lane) override { static_cast<CudaMark&>(mark).event.record(stream(lane)); }
  bool reached(const LaneMark& mark) override { return as_cuda(mark).event.query(); }
  void wait_for(Lane lane, const LaneMark& mark) override {
    cu::check_cuda(cudaStreamWaitEvent(stream(lane), static_cast<cudaEvent_t>(as_cuda(mark).event.handle()), 0),
                   "cudaStreamWaitEvent");
  }
  void synchronize(Lane lane) override {
    cu::check_cuda(cudaStreamSynchronize(stream(lane)), "cudaStreamSynchronize (IPC transport)");
  }

 private:
  cudaStream_t stream(Lane lane) const {
    switch (lane) {
      case Lane::compute: return static_cast<cudaStream_t>(compute_);
      case Lane::gather: return static_cast<cudaStream_t>(gather_.handle());
      case Lane::push: return static_cast<cudaStream_t>(push_.handle());
      case Lane::accumulate: return static_cast<cudaStream_t>(accumulate_.handle());
    }
    return nullptr;
  }

  int device_;
  void* compute_;
  Device backend_device_;
  cu::Stream gather_, push_, accumulate_;
  std::vector<std::unique_ptr<void, CudaFree>> exported_;  // cudaMalloc'd here
  std::vector<std::unique_ptr<void, IpcClose>> opened_;    // peers' regions
};

}  // namespace

std::unique_ptr<PeerMemory> make_cuda_peer_memory(backend::Backend& backend) {
  if (backend.device().kind != DeviceKind::cuda || backend.native_stream() == nullptr) {
    fail("the CUDA IPC transport needs a backend on a CUDA device with a stream, got the {} backend", backend.name());
  }
  return std::make_unique<CudaPeerMemory>(backend);
}

}  // namespace odc::distributed
