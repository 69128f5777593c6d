// PeerMemory over host shared memory: regions are POSIX shared-memory segments that every rank
// of the host maps; every operation runs to completion on the calling thread.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "odc/core/error.h"
#include "odc/distributed/transport/ipc/peer_memory.h"
#include "odc/distributed/group/shared_segment.h"
#include "odc/kernels/cast.h"

namespace odc::distributed {

namespace {

class HostMark final : public LaneMark {};

class HostPeerMemory final : public PeerMemory {
 public:
  HostPeerMemory(std::string prefix, int rank) : prefix_(std::move(prefix)), rank_(rank) {}

  Device device() const override { return Device::cpu(); }
  std::string_view name() const override { return "host shared memory"; }

  void* export_region(std::size_t bytes, std::string_view what, std::string& handle) override {
    const std::string name = fmt::format("{}-r{}-{}", prefix_, rank_, exported_.size());
    // A region of 0 bytes still gets a page: every rank maps every peer's regions alike.
    const std::size_t size = bytes == 0 ? 1 : bytes;
    exported_.push_back(SharedSegment::create(name, size, what));
    // The exporter's pid and address: a rank of the same process (threads as ranks) uses this
    // mapping itself, as CUDA IPC must, so that one memory has one address in a process.
    handle = fmt::format("shm {} {} {} {:x}", name, size, ::getpid(), reinterpret_cast<std::uintptr_t>(exported_.back().data()));
    return exported_.back().data();
  }

  void* open(const std::string& handle, std::string_view what) override {
    char name[256] = {};
    unsigned long long size = 0, address = 0;
    long long pid = 0;
    if (std::sscanf(handle.c_str(), "shm %255s %llu %lld %llx", name, &size, &pid, &address) != 4) {
      fail("{}: '{}' is not a host shared-memory handle (do all ranks use the same transport?)", what, handle);
    }
    if (pid == ::getpid()) return reinterpret_cast<void*>(static_cast<std::uintptr_t>(address));
    opened_.push_back(SharedSegment::open(name, size, what));
    return opened_.back().data();
  }

  void all_opened() override {
    for (auto& s : exported_) s.unlink();
  }

  void copy(Lane, void* dst, const void* src, std::size_t bytes) override {
    if (bytes != 0) std::memcpy(dst, src, bytes);
  }
  void zero(Lane, void* dst, std::size_t bytes) override {
    if (bytes != 0) std::memset(dst, 0, bytes);
  }
  void add(Lane, float* acc, const float* in, std::int64_t n) override {
    float* __restrict a = acc;
    const float* __restrict b = in;
#pragma omp simd
    for (std::int64_t i = 0; i < n; ++i) a[i] += b[i];
  }
  void narrow(Lane, std::uint16_t* dst, const float* src, std::int64_t n) override {
    kernels::cpu::cast_f32_to_bf16(src, dst, n);
  }
  void widen(Lane, float* dst, const std::uint16_t* src, std::int64_t n) override {
    kernels::cpu::cast_bf16_to_f32(src, dst, n);
  }

  std::unique_ptr<LaneMark> make_mark() override { return std::make_unique<HostMark>(); }
  void record(LaneMark&, Lane) override {}
  bool reached(const LaneMark&) override { return true; }
  void wait_for(Lane, const LaneMark&) override {}
  void synchronize(Lane) override {}

 private:
  std::string prefix_;
  int rank_;
  std::vector<SharedSegment> exported_;
  std::vector<SharedSegment> opened_;
};

}  // namespace

std::unique_ptr<PeerMemory> make_host_peer_memory(const std::string& prefix, int rank) {
  return std::make_unique<HostPeerMemory>(prefix, rank);
}

}  // namespace odc::distributed
