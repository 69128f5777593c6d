#pragma once
// PeerMemory: the memory a rank shares with the other ranks of its host, and the ordered work
// (copies, adds, casts) the IPC transport runs on it. Two implementations, one transport above
// them (ipc_transport.h):
//
//   host   (make_host_peer_memory)  regions are POSIX shared memory mapped by every rank; every
//          operation runs at once on the calling thread, marks are always reached. It is the
//          transport of ranks of one CPU host, and it proves the protocol on any machine.
//   CUDA   (cuda_peer_memory.h)     regions are cudaMalloc allocations exported with CUDA IPC
//          handles (peers of the same process use the pointer itself); operations run on CUDA
//          streams, marks are CUDA events. Several ranks may share one GPU.
//
// Work is issued on lanes, each in order: `compute` is the model's stream (the backend's), the
// others belong to the transport (gathers on the compute thread, pushes and accumulation on its
// progress thread). Thread safety: a lane is used by one thread at a time; marks and the
// different lanes may be used from different threads.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "odc/core/dtype.h"

namespace odc::distributed {

enum class Lane { compute, gather, push, accumulate };

// A point in a lane's work (an event): reached once everything issued before record() completed.
class LaneMark {
 public:
  virtual ~LaneMark() = default;
};

class PeerMemory {
 public:
  virtual ~PeerMemory() = default;
  virtual Device device() const = 0;
  virtual std::string_view name() const = 0;  // "host shared memory", "CUDA IPC"

  // A zero-filled region of `bytes` that peers may map, owned by this object. `handle` receives
  // the text a peer passes to open(). `what` names it in errors.
  virtual void* export_region(std::size_t bytes, std::string_view what, std::string& handle) = 0;
  // Maps a peer's exported region; valid for this object's lifetime.
  virtual void* open(const std::string& handle, std::string_view what) = 0;
  // Every rank has opened every region it needs: names (shared-memory files) may go.
  virtual void all_opened() {}
  // Called first on every other thread that issues work (the progress thread): a CUDA device
  // is current per thread.
  virtual void enter_thread() {}

  virtual void copy(Lane lane, void* dst, const void* src, std::size_t bytes) = 0;
  virtual void zero(Lane lane, void* dst, std::size_t bytes) = 0;
  // acc[i] += in[i], fp32.
  virtual void add(Lane lane, float* acc, const float* in, std::int64_t n) = 0;
  // bf16 <-> fp32 (round to nearest even), as the backends' weight casts.
  virtual void narrow(Lane lane, std::uint16_t* dst, const float* src, std::int64_t n) = 0;
  virtual void widen(Lane lane, float* dst, const std::uint16_t* src, std::int64_t n) = 0;

  virtual std::unique_ptr<LaneMark> make_mark() = 0;
  virtual void record(LaneMark& mark, Lane lane) = 0;
  virtual bool reached(const LaneMark& mark) = 0;
  // Work issued on `lane` after this call waits for `mark` (the host does not block).
  virtual void wait_for(Lane lane, const LaneMark& mark) = 0;
  // The host blocks until everything issued on `lane` completed.
  virtual void synchronize(Lane lane) = 0;
};

// Host shared memory; region names start with `prefix` (unique_segment_prefix() of rank 0) and
// this rank's number.
std::unique_ptr<PeerMemory> make_host_peer_memory(const std::string& prefix, int rank);

}  // namespace odc::distributed
