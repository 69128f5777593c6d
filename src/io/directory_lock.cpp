#include "odc/io/directory_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "odc/core/error.h"

namespace odc::io {

namespace fs = std::filesystem;

namespace {

std::string utc_now() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "?";
  return name;
}

// Creates `dir` if needed and opens (creating) its lock file.
int open_lock_file(const std::string& dir, const std::string& path) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) {
    fail("checkpoint: cannot create '{}': {}", dir, ec ? ec.message() : std::string("not a directory"));
  }
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) fail("checkpoint: cannot open '{}': {}", path, std::strerror(errno));
  return fd;
}

std::string read_all(int fd) {
  std::string text;
  char buffer[1024];
  off_t offset = 0;
  for (;;) {
    const ssize_t n = ::pread(fd, buffer, sizeof buffer, offset);
    if (n <= 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
    offset += n;
  }
  return text;
}

}  // namespace

nlohmann::json LockHolder::to_json() const {
  return {{"run_id", run_id}, {"host", host}, {"pid", pid}, {"since", since}};
}

LockHolder LockHolder::from_text(const std::string& text) {
  LockHolder holder{"?", "?", 0, "?"};
  const auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) return holder;
  auto text_of = [&](const char* key) {
    const auto it = json.find(key);
    return it != json.end() && it->is_string() && !it->get<std::string>().empty() ? it->get<std::string>()
                                                                                   : std::string("?");
  };
  holder.run_id = text_of("run_id");
  holder.host = text_of("host");
  holder.since = text_of("since");
  if (const auto it = json.find("pid"); it != json.end() && it->is_number_integer()) holder.pid = it->get<long>();
  return holder;
}

LockHolder this_process(const std::string& run_id) {
  return {run_id, host_name(), static_cast<long>(::getpid()), utc_now()};
}

DirectoryLock::DirectoryLock(const std::string& dir, const LockHolder& me)
    : path_((fs::path(dir) / ".lock").string()), fd_(open_lock_file(dir, path_)) {
  if (::flock(fd_.get(), LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err == EWOULDBLOCK) {
      const LockHolder o = LockHolder::from_text(read_all(fd_.get()));
      fail("checkpoint directory '{}' is in use by run {} (host {}, pid {}, since {}): one job at a time per "
           "directory; wait for it to end, or give this job another checkpoint.dir",
           dir, o.run_id, o.host, o.pid > 0 ? std::to_string(o.pid) : std::string("?"), o.since);
    }
    // The file system keeps no locks (ENOLCK, EINVAL, ENOTSUP): the caller warns and goes on.
    unlocked_reason_ = fmt::format("flock on '{}' failed: {}", path_, std::strerror(err));
    return;
  }
  locked_ = true;
  update(me);
}

void DirectoryLock::update(const LockHolder& me) {
  if (!locked_) return;
  const std::string text = me.to_json().dump() + "\n";
  // In place (the lock is on this inode): truncate, write, flush. A reader racing with it sees a
  // torn text, which reads as "?" fields.
  if (::ftruncate(fd_.get(), 0) != 0 || ::pwrite(fd_.get(), text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    fail("checkpoint: cannot write '{}': {}", path_, std::strerror(errno));
  }
  ::fsync(fd_.get());
}

}  // namespace odc::io
