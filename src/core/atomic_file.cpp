#include "odc/core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "odc/core/error.h"
#include "odc/core/file_descriptor.h"

namespace odc {

void write_file_atomically(const std::string& path, std::string_view content) {
  const std::string tmp = path + ".tmp";
  FileDescriptor fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) fail("cannot create '{}': {}", tmp, std::strerror(errno));
  const char* p = content.data();
  std::size_t left = content.size();
  while (left > 0) {
    const ssize_t n = ::write(fd.get(), p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("writing '{}' failed: {}", tmp, std::strerror(errno));
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  if (::fsync(fd.get()) != 0) fail("fsync of '{}' failed: {}", tmp, std::strerror(errno));
  if (fd.close_checked() != 0) fail("closing '{}' failed: {}", tmp, std::strerror(errno));
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) fail("cannot rename '{}' to '{}': {}", tmp, path, ec.message());
  const auto parent = std::filesystem::path(path).parent_path();
  fsync_directory(parent.empty() ? std::string(".") : parent.string());
}

void fsync_directory(const std::string& path) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) fail("cannot open directory '{}': {}", path, std::strerror(errno));
  if (::fsync(fd.get()) != 0) fail("fsync of directory '{}' failed: {}", path, std::strerror(errno));
}

}  // namespace odc
