#pragma once
// SharedSegment: a named block of host memory that the processes (or threads) of one host map
// together — a POSIX shared-memory object, created by one side, opened by the others, unlinked
// as soon as everyone has it mapped so that nothing is left in /dev/shm even if the job dies.
//
// The one shared-memory segment class: the ShmHostGroup's segment (odc-run --local), the IPC
// transport's control blocks (slot states, headers) and the host implementation of peer memory's
// shared regions all live in these. Beside it, the one liveness check of a peer process of this
// host (process_exited), which every user of shared memory with other processes relies on.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace odc::distributed {

class SharedSegment {
 public:
  SharedSegment() = default;
  // Creates `name` (a POSIX shm name "/..."), sized `bytes`, zero-filled, with its memory reserved
  // (a full /dev/shm is this error, not a SIGBUS in the middle of a run), and maps it. An existing
  // object of the name is an error (names carry a job id; see unique_segment_prefix()).
  static SharedSegment create(const std::string& name, std::size_t bytes, std::string_view what);
  // The same, but an existing object of the name is no error: nothing is created (the caller
  // decides whether the one there is stale; see remove()).
  static std::optional<SharedSegment> try_create(const std::string& name, std::size_t bytes, std::string_view what);
  // Maps an existing segment `name` of `bytes` bytes (another rank created it).
  static SharedSegment open(const std::string& name, std::size_t bytes, std::string_view what);
  // Maps whatever segment `name` holds now, at its current size (0 bytes: nothing mapped, data()
  // null: its creator has not sized it yet); nothing when no such name exists.
  static std::optional<SharedSegment> try_open(const std::string& name, std::string_view what);
  // Removes the name `name` (a segment another process left behind). No error if it is gone.
  static void remove(const std::string& name);
  ~SharedSegment();
  SharedSegment(SharedSegment&& other) noexcept;
  SharedSegment& operator=(SharedSegment&& other) noexcept;
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  const std::string& name() const { return name_; }
  // Removes the name (the mapping stays valid). Idempotent; the creator also unlinks on destruction.
  void unlink();

 private:
  void reset() noexcept;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  std::string name_;
  bool owner_ = false;  // created it: unlinks the name if still linked
};

// Whether process `pid` of this host has ended: gone, or a zombie its parent has not reaped. This
// process never has (ranks that are threads of one process share it); pid 0 is no process.
bool process_exited(std::uint64_t pid);

// A prefix no other job on this host uses ("/odc-<pid>-<random>"), for rank 0 to pick and share.
std::string unique_segment_prefix();

}  // namespace odc::distributed
