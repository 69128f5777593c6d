// Writing safetensors files: the header first (tensor names, dtypes, shapes, offsets, 8-byte
// aligned data), then the data, under path + ".tmp" until commit() renames it into place.
#include "odc/io/safetensors_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "odc/core/error.h"
#include "odc/io/safetensors.h"

namespace odc::io {

// Tensor bytes are copied as they sit in memory; the format is little-endian.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

void write_all(int fd, const void* data, std::size_t bytes, const std::string& path) {
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t written = ::write(fd, p, bytes);
    if (written < 0) {
      if (errno == EINTR) continue;
      fail("safetensors file '{}': write failed: {}", path, std::strerror(errno));
    }
    p += written;
    bytes -= static_cast<std::size_t>(written);
  }
}

}  // namespace

SafetensorsPieceWriter::SafetensorsPieceWriter(std::string path, const std::vector<SafetensorsEntry>& layout,
                                               const std::map<std::string, std::string>& metadata)
    : path_(std::move(path)), tmp_path_(path_ + ".tmp") {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header[kSafetensorsMetadataKey] = std::move(meta);
  }
  std::set<std::string> seen;
  for (const auto& t : layout) {
    if (t.name.empty() || t.name == kSafetensorsMetadataKey) {
      fail("safetensors file '{}': invalid tensor name '{}'", path_, t.name);
    }
    if (!seen.insert(t.name).second) fail("safetensors file '{}': duplicate tensor '{}'", path_, t.name);
    const std::uint64_t bytes =
        static_cast<std::uint64_t>(shape_numel(t.shape)) * dtype_size(t.dtype);
    header[t.name] = {{"dtype", safetensors_dtype_code(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {data_bytes_, data_bytes_ + bytes}}};
    offsets_.push_back(data_bytes_);
    data_bytes_ += bytes;
  }
  std::string header_text = header.dump();
  // Pad with spaces so the data region starts 8-byte aligned (as the reference writer does).
  header_text.append((8 - header_text.size() % 8) % 8, ' ');

  std::byte length_bytes[8];
  std::uint64_t length = header_text.size();
  for (auto& b : length_bytes) {
    b = static_cast<std::byte>(length & 0xff);
    length >>= 8;
  }
  data_start_ = sizeof(length_bytes) + header_text.size();
  fd_.emplace(::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd_->get() < 0) {
    fd_.reset();
    fail("safetensors file '{}': cannot create: {}", tmp_path_, std::strerror(errno));
  }
  write_all(fd_->get(), length_bytes, sizeof(length_bytes), tmp_path_);
  write_all(fd_->get(), header_text.data(), header_text.size(), tmp_path_);
}

SafetensorsPieceWriter::~SafetensorsPieceWriter() {
  // Not committed (an error on the way): the partial file must not linger next to good ones.
  if (fd_) {
    fd_.reset();
    ::unlink(tmp_path_.c_str());
  }
}

void SafetensorsPieceWriter::write_at(std::uint64_t offset, const void* data, std::size_t bytes) {
  if (!fd_) fail("safetensors file '{}': {} bytes written after commit", path_, bytes);
  if (offset > data_bytes_ || bytes > data_bytes_ - offset) {
    fail("safetensors file '{}': bytes [{}, {}) written, but the data region holds {} bytes", path_, offset,
         offset + bytes, data_bytes_);
  }
  if (bytes > 0 && data == nullptr) fail("safetensors file '{}': no data for bytes [{}, {})", path_, offset, offset + bytes);
  const auto* p = static_cast<const char*>(data);
  auto at = static_cast<off_t>(data_start_ + offset);
  for (std::size_t left = bytes; left > 0;) {
    const ssize_t written = ::pwrite(fd_->get(), p, left, at);
    if (written < 0) {
      if (errno == EINTR) continue;
      fail("safetensors file '{}': write failed: {}", tmp_path_, std::strerror(errno));
    }
    p += written;
    at += written;
    left -= static_cast<std::size_t>(written);
  }
  written_ += bytes;
}

void SafetensorsPieceWriter::commit() {
  if (!fd_) fail("safetensors file '{}': committed twice", path_);
  if (written_ != data_bytes_) {
    fail("safetensors file '{}': commit after {} of its {} data bytes were written", path_, written_, data_bytes_);
  }
  // fsync before rename: otherwise a crash can leave the new name pointing at unwritten blocks.
  if (::fsync(fd_->get()) != 0) {
    fail("safetensors file '{}': fsync failed: {}", tmp_path_, std::strerror(errno));
  }
  const int closed = fd_->close_checked();
  fd_.reset();
  if (closed != 0) fail("safetensors file '{}': close failed: {}", tmp_path_, std::strerror(errno));
  std::error_code ec;
  std::filesystem::rename(tmp_path_, path_, ec);
  if (ec) fail("safetensors file '{}': cannot rename from '{}': {}", path_, tmp_path_, ec.message());
}

SafetensorsStreamWriter::SafetensorsStreamWriter(std::string path, const std::vector<SafetensorsEntry>& layout,
                                                 const std::map<std::string, std::string>& metadata)
    : layout_(layout), file_(std::move(path), layout, metadata) {}

void SafetensorsStreamWriter::append(const std::string& name, const void* data) {
  if (next_ >= layout_.size()) {
    fail("safetensors file '{}': tensor '{}' appended, but all {} tensors are written", path(), name,
         layout_.size());
  }
  const SafetensorsEntry& t = layout_[next_];
  if (t.name != name) {
    fail("safetensors file '{}': tensor '{}' appended where '{}' comes next", path(), name, t.name);
  }
  const auto bytes = static_cast<std::size_t>(shape_numel(t.shape)) * dtype_size(t.dtype);
  if (bytes > 0 && data == nullptr) fail("safetensors file '{}': tensor '{}' has no data", path(), name);
  file_.write_at(file_.tensor_offset(next_), data, bytes);
  ++next_;
}

void SafetensorsStreamWriter::commit() {
  if (next_ != layout_.size()) {
    fail("safetensors file '{}': commit after {} of {} tensors (next: '{}')", path(), next_,
         layout_.size(), layout_[next_].name);
  }
  file_.commit();
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsEntry>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  SafetensorsStreamWriter writer(path, tensors, metadata);
  for (const auto& t : tensors) writer.append(t.name, t.data);
  writer.commit();
}

}  // namespace odc::io
