#pragma once
// A read-only mmap of a whole file (the binary dataset's two files are used in place through it).
#include <cstddef>
#include <span>
#include <string>

namespace odc::data {

// A read-only mmap of a whole file, unmapped on destruction. An empty file maps to an empty span.
class MappedFile {
 public:
  // Throws odc::Error naming `path` when it cannot be opened, stat'ed or mapped.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const std::byte> bytes() const { return {data_, size_}; }
  std::size_t size() const { return size_; }

 private:
  void release() noexcept;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace odc::data
