#pragma once
// SharedSegment: a named block of host memory that the processes (or threads) of one host map
// together — a POSIX shared-memory object, created by one side, opened by the others, unlinked
// as soon as everyone has it mapped so that nothing is left in /dev/shm even if the job dies.
//
// The IPC transport keeps its control blocks (slot states, headers) in these, and the host
// implementation of peer memory its shared regions.
#include <cstddef>
#include <string>
#include <string_view>

namespace odc::distributed {

class SharedSegment {
 public:
  SharedSegment() = default;
  // Creates `name` (a POSIX shm name "/..."), sized `bytes`, zero-filled, and maps it. An existing
  // object of the name is an error (names carry a job id; see unique_segment_prefix()).
  static SharedSegment create(const std::string& name, std::size_t bytes, std::string_view what);
  // Maps an existing segment `name` of `bytes` bytes (another rank created it).
  static SharedSegment open(const std::string& name, std::size_t bytes, std::string_view what);
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

// A prefix no other job on this host uses ("/odc-<pid>-<random>"), for rank 0 to pick and share.
std::string unique_segment_prefix();

}  // namespace odc::distributed
