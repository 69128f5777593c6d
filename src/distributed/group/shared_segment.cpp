#include "odc/distributed/group/shared_segment.h"

#include <fcntl.h>
#include <signal.h>
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
#include "odc/core/process_stats.h"

namespace odc::distributed {

namespace {
void* map(int fd, std::size_t bytes, const std::string& name, std::string_view what) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) fail("{}: cannot map shared memory {} ({} bytes): {}", what, name, bytes, std::strerror(errno));
  return p;
}
}  // namespace

SharedSegment SharedSegment::create(const std::string& name, std::size_t bytes, std::string_view what) {
  auto s = try_create(name, bytes, what);
  if (!s) fail("{}: cannot create shared memory {}: {}", what, name, std::strerror(EEXIST));
  return std::move(*s);
}

std::optional<SharedSegment> SharedSegment::try_create(const std::string& name, std::size_t bytes,
                                                       std::string_view what) {
  const int raw = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (raw < 0 && errno == EEXIST) return std::nullopt;
  if (raw < 0) fail("{}: cannot create shared memory {}: {}", what, name, std::strerror(errno));
  const FileDescriptor fd(raw);
  SharedSegment s;
  s.name_ = name;
  s.owner_ = true;  // from here on a failure removes the name again (the destructor)
  if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
    fail("{}: cannot size shared memory {} to {} bytes: {} (is /dev/shm large enough?)", what, name, bytes,
         std::strerror(errno));
  }
  // Reserved now, so that a full /dev/shm is this error, not a SIGBUS in the middle of a run.
  if (const int e = bytes == 0 ? 0 : ::posix_fallocate(fd.get(), 0, static_cast<off_t>(bytes)); e != 0) {
    fail("{}: cannot reserve {} bytes of shared memory for {}: {} (is /dev/shm full or too small?)", what, bytes, name,
         std::strerror(e));
  }
  if (bytes > 0) s.data_ = map(fd.get(), bytes, name, what);
  s.bytes_ = bytes;
  return s;
}

SharedSegment SharedSegment::open(const std::string& name, std::size_t bytes, std::string_view what) {
  auto s = try_open(name, what);
  if (!s) fail("{}: cannot open shared memory {} of a peer: {}", what, name, std::strerror(ENOENT));
  if (s->bytes() < bytes) fail("{}: shared memory {} holds {} bytes, expected {}", what, name, s->bytes(), bytes);
  return std::move(*s);
}

std::optional<SharedSegment> SharedSegment::try_open(const std::string& name, std::string_view what) {
  const int raw = ::shm_open(name.c_str(), O_RDWR, 0600);
  if (raw < 0 && errno == ENOENT) return std::nullopt;
  if (raw < 0) fail("{}: cannot open shared memory {}: {}", what, name, std::strerror(errno));
  const FileDescriptor fd(raw);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail("{}: cannot stat shared memory {}: {}", what, name, std::strerror(errno));
  SharedSegment s;
  s.name_ = name;
  s.bytes_ = static_cast<std::size_t>(st.st_size);
  if (s.bytes_ > 0) s.data_ = map(fd.get(), s.bytes_, name, what);
  return s;
}

void SharedSegment::remove(const std::string& name) { ::shm_unlink(name.c_str()); }

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

bool process_exited(std::uint64_t pid) {
  if (pid == 0 || pid == static_cast<std::uint64_t>(::getpid())) return false;
  if (::kill(static_cast<pid_t>(pid), 0) == -1) return errno == ESRCH;
  // It exists; a zombie has exited all the same.
  const auto stat = read_process_stat(static_cast<long>(pid));
  return stat && stat->exited();
}

std::string unique_segment_prefix() {
  std::random_device device;
  const std::uint64_t salt = (static_cast<std::uint64_t>(device()) << 32) ^ device();
  return fmt::format("/odc-{}-{:016x}", ::getpid(), salt);
}

}  // namespace odc::distributed
