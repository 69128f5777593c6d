#include "odc/distributed/shared_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <utility>

#include <fmt/format.h>

#include "odc/core/error.h"
#include "odc/core/file_descriptor.h"

namespace odc::distributed {

namespace {
void* map(int fd, std::size_t bytes, const std::string& name, std::string_view what) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) fail("{}: cannot map shared memory {} ({} bytes): {}", what, name, bytes, std::strerror(errno));
  return p;
}
}  // namespace

SharedSegment SharedSegment::create(const std::string& name, std::size_t bytes, std::string_view what) {
  const int raw = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (raw < 0) fail("{}: cannot create shared memory {}: {}", what, name, std::strerror(errno));
  const FileDescriptor fd(raw);
  SharedSegment s;
  s.name_ = name;
  s.owner_ = true;
  if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
    const int err = errno;
    ::shm_unlink(name.c_str());
    fail("{}: cannot size shared memory {} to {} bytes: {} (is /dev/shm large enough?)", what, name, bytes,
         std::strerror(err));
  }
  s.data_ = map(fd.get(), bytes, name, what);
  s.bytes_ = bytes;
  return s;
}

SharedSegment SharedSegment::open(const std::string& name, std::size_t bytes, std::string_view what) {
  const int raw = ::shm_open(name.c_str(), O_RDWR, 0600);
  if (raw < 0) fail("{}: cannot open shared memory {} of a peer: {}", what, name, std::strerror(errno));
  const FileDescriptor fd(raw);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || static_cast<std::size_t>(st.st_size) < bytes) {
    fail("{}: shared memory {} holds {} bytes, expected {}", what, name, static_cast<long long>(st.st_size), bytes);
  }
  SharedSegment s;
  s.name_ = name;
  s.data_ = map(fd.get(), bytes, name, what);
  s.bytes_ = bytes;
  return s;
}

SharedSegment::~SharedSegment() { reset(); }

SharedSegment::SharedSegment(SharedSegment&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      name_(std::move(other.name_)),
      owner_(std::exchange(other.owner_, false)) {}

SharedSegment& SharedSegment::operator=(SharedSegment&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    name_ = std::move(other.name_);
    owner_ = std::exchange(other.owner_, false);
  }
  return *this;
}

void SharedSegment::unlink() {
  if (owner_) ::shm_unlink(name_.c_str());
  owner_ = false;
}

void SharedSegment::reset() noexcept {
  if (owner_) ::shm_unlink(name_.c_str());
  if (data_ != nullptr) ::munmap(data_, bytes_);
  data_ = nullptr;
  bytes_ = 0;
  owner_ = false;
}

std::string unique_segment_prefix() {
  std::random_device device;
  const std::uint64_t salt = (static_cast<std::uint64_t>(device()) << 32) ^ device();
  return fmt::format("/odc-{}-{:016x}", ::getpid(), salt);
}

}  // namespace odc::distributed
