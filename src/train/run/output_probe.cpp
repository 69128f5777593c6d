#include "odc/train/run/output_probe.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "odc/core/error.h"

namespace odc::train {

namespace fs = std::filesystem;

namespace {

// Creates and removes a uniquely named file in `dir`: proves that files can be made there (as
// root, permission bits say little; a read-only mount or a full inode table still refuses).
void probe_directory_writable(const fs::path& dir, const std::string& key, const std::string& target) {
  const fs::path probe = dir / (".odc-write-probe-" + std::to_string(::getpid()));
  std::FILE* f = std::fopen(probe.c_str(), "wb");
  if (f == nullptr) {
    fail("{}: cannot write '{}': cannot create a file in '{}': {}", key, target, dir.string(), std::strerror(errno));
  }
  std::fclose(f);
  std::error_code ignored;
  fs::remove(probe, ignored);
}

}  // namespace

void probe_output_file(const std::string& path, const std::string& key) {
  const fs::path p(path);
  std::error_code ec;
  if (fs::is_directory(p, ec)) fail("{}: '{}' is a directory; expected the path of a file", key, path);
  const fs::path parent = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  fs::create_directories(parent, ec);
  if (ec) fail("{}: cannot write '{}': cannot create its directory '{}': {}", key, path, parent.string(), ec.message());
  const bool existed = fs::exists(p, ec);
  std::FILE* f = std::fopen(path.c_str(), "ab");
  if (f == nullptr) fail("{}: cannot write '{}': {}", key, path, std::strerror(errno));
  std::fclose(f);
  if (!existed) fs::remove(p, ec);
}

void probe_output_directory(const std::string& dir, const std::string& key) {
  const fs::path p(dir);
  std::error_code ec;
  if (fs::exists(p, ec)) {
    if (!fs::is_directory(p, ec)) fail("{}: '{}' exists and is not a directory", key, dir);
    probe_directory_writable(p, key, dir);
    return;
  }
  // The nearest ancestor that exists: it must be a directory where the missing ones can be made.
  fs::path ancestor = fs::absolute(p, ec).parent_path();
  while (!ancestor.empty() && !fs::exists(ancestor, ec) && ancestor != ancestor.root_path()) {
    ancestor = ancestor.parent_path();
  }
  if (!fs::is_directory(ancestor, ec)) {
    fail("{}: cannot create '{}': '{}' is not a directory", key, dir, ancestor.string());
  }
  probe_directory_writable(ancestor, key, dir);
}

}  // namespace odc::train
