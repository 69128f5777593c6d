// The binary dataset's writer (odc/data/bin_dataset.h for the format): builds the index in memory,
// checksums the token payload as it streams out, and publishes both files atomically.
#include "odc/data/bin_dataset_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <utility>
#include <vector>

#include "bin_format.h"
#include "odc/core/error.h"
#include "odc/core/file_descriptor.h"
#include "odc/data/bin_dataset.h"

namespace odc::data {
namespace {

using namespace bin_index;

// The writer's side of the payload checksums: token bytes arrive a sequence at a time, chunks
// span sequences.
class ChunkHasher {
 public:
  void add(const void* data, std::size_t bytes) {
    const auto* p = static_cast<const std::byte*>(data);
    while (bytes > 0) {
      const std::size_t take = std::min(bytes, static_cast<std::size_t>(kChunkBytes) - pending_.size());
      pending_.insert(pending_.end(), p, p + take);
      p += take;
      bytes -= take;
      if (pending_.size() == static_cast<std::size_t>(kChunkBytes)) flush();
    }
  }
  std::vector<std::uint64_t> finish() {
    if (!pending_.empty()) flush();
    return std::move(sums_);
  }

 private:
  void flush() {
    sums_.push_back(bin_payload_checksum(pending_));
    pending_.clear();
  }
  std::vector<std::byte> pending_;
  std::vector<std::uint64_t> sums_;
};

// A buffered output file under a temporary name, removed on destruction unless it was renamed
// into place: a failed conversion leaves no half-written ".tmp" behind.
class TempOutputFile {
 public:
  explicit TempOutputFile(std::string path)
      : path_(std::move(path)),
        fd_(::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) {
    if (fd_.get() < 0) fail("{}: cannot create: {}", path_, std::strerror(errno));
    buffer_.reserve(kBufferBytes);
  }
  ~TempOutputFile() {
    if (!renamed_) {
      std::error_code ec;
      std::filesystem::remove(path_, ec);  // best effort: we are already unwinding an error
    }
  }
  TempOutputFile(const TempOutputFile&) = delete;
  TempOutputFile& operator=(const TempOutputFile&) = delete;

  void write(const void* data, std::size_t bytes) {
    if (buffer_.size() + bytes > kBufferBytes) flush();
    if (bytes >= kBufferBytes) {
      write_all(data, bytes);
      return;
    }
    const auto* p = static_cast<const char*>(data);
    buffer_.insert(buffer_.end(), p, p + bytes);
  }

  // Flushes, fsyncs (before any rename: otherwise a crash can leave the final name pointing at
  // unwritten blocks) and closes, reporting any delayed write error.
  void finish() {
    flush();
    if (::fsync(fd_.get()) != 0) fail("{}: fsync failed: {}", path_, std::strerror(errno));
    if (fd_.close_checked() != 0) fail("{}: close failed: {}", path_, std::strerror(errno));
  }

  void rename_to(const std::string& final_path) {
    std::error_code ec;
    std::filesystem::rename(path_, final_path, ec);
    if (ec) fail("{}: cannot rename from '{}': {}", final_path, path_, ec.message());
    renamed_ = true;
  }

 private:
  static constexpr std::size_t kBufferBytes = std::size_t{1} << 20;

  void flush() {
    write_all(buffer_.data(), buffer_.size());
    buffer_.clear();
  }

  void write_all(const void* data, std::size_t bytes) {
    const auto* p = static_cast<const char*>(data);
    while (bytes > 0) {
      const ssize_t written = ::write(fd_.get(), p, bytes);
      if (written < 0) {
        if (errno == EINTR) continue;
        fail("{}: write failed: {}", path_, std::strerror(errno));
      }
      p += written;
      bytes -= static_cast<std::size_t>(written);
    }
  }

  std::string path_;
  FileDescriptor fd_;
  std::vector<char> buffer_;
  bool renamed_ = false;
};

// Makes the renames themselves durable. Best effort: some filesystems refuse fsync on directories.
void sync_directory_of(const std::string& path) {
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  const FileDescriptor fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() >= 0) ::fsync(fd.get());
}

}  // namespace

void write_bin_dataset(const std::string& prefix, const TokenDataset& source) {
  const std::int64_t count = source.size();
  if (count < 1) fail("{}.bin: cannot write an empty dataset ({})", prefix, source.describe());

  const std::string bin_path = prefix + ".bin";
  const std::string idx_path = prefix + ".idx";
  // A missing directory is created, as odc-data synth does for its output.
  if (const auto dir = std::filesystem::path(bin_path).parent_path(); !dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) fail("{}: cannot create its directory {}: {}", bin_path, dir.string(), ec.message());
  }
  TempOutputFile bin(bin_path + ".tmp");
  ChunkHasher payload;

  std::vector<std::int64_t> offsets = {0};
  std::vector<std::int64_t> span_offsets = {0};
  std::vector<std::uint32_t> spans;  // (start, length) pairs
  offsets.reserve(static_cast<std::size_t>(count) + 1);
  span_offsets.reserve(static_cast<std::size_t>(count) + 1);
  for (std::int64_t i = 0; i < count; ++i) {
    const SequenceView seq = source.get(i);
    const std::size_t length = seq.tokens.size();
    if (length == 0) fail("{}: sequence {} is empty", source.describe(), i);
    // Spans store positions as uint32.
    if (length > std::numeric_limits<std::uint32_t>::max()) {
      fail("{}: sequence {} has {} tokens, more than the format's limit of {}", source.describe(),
           i, length, std::numeric_limits<std::uint32_t>::max());
    }
    ODC_CHECK(seq.target_mask.size() == length, "mask of sequence {} has {} entries, tokens {}", i,
              seq.target_mask.size(), length);
    for (std::size_t j = 0; j < length; ++j) {
      if (seq.tokens[j] < 0) {
        fail("{}: negative token id {} at position {} of sequence {}", source.describe(),
             seq.tokens[j], j, i);
      }
    }
    // Non-negative int32 has the bit pattern of the same uint32.
    bin.write(seq.tokens.data(), length * sizeof(std::int32_t));
    payload.add(seq.tokens.data(), length * sizeof(std::int32_t));

    for (std::size_t j = 0; j < length;) {
      if (seq.target_mask[j] == 0) {
        ++j;
        continue;
      }
      const std::size_t start = j;
      while (j < length && seq.target_mask[j] != 0) ++j;
      spans.push_back(static_cast<std::uint32_t>(start));
      spans.push_back(static_cast<std::uint32_t>(j - start));
    }
    offsets.push_back(offsets.back() + static_cast<std::int64_t>(length));
    span_offsets.push_back(static_cast<std::int64_t>(spans.size() / 2));
  }

  const std::int64_t total_spans = span_offsets.back();
  const std::vector<std::uint64_t> sums = payload.finish();
  ODC_CHECK(sums.size() == chunk_count(offsets.back(), kChunkBytes), "{} payload checksums for {} tokens",
            sums.size(), offsets.back());
  std::vector<std::byte> index(index_bytes(kHeaderBytes, count, total_spans, sums.size()));
  std::memcpy(index.data(), kMagic.data(), kMagic.size());
  store<std::uint32_t>(index.data() + 8, kVersion);
  store<std::uint32_t>(index.data() + 12, 0);
  store<std::int64_t>(index.data() + 16, count);
  store<std::int64_t>(index.data() + 24, offsets.back());
  store<std::int64_t>(index.data() + 32, total_spans);
  store<std::int64_t>(index.data() + kChunkBytesOffset, kChunkBytes);
  std::byte* cursor = index.data() + kHeaderBytes;
  for (const auto* section : {&offsets, &span_offsets}) {
    std::memcpy(cursor, section->data(), section->size() * sizeof(std::int64_t));
    cursor += section->size() * sizeof(std::int64_t);
  }
  if (!spans.empty()) std::memcpy(cursor, spans.data(), spans.size() * sizeof(std::uint32_t));
  cursor += spans.size() * sizeof(std::uint32_t);
  std::memcpy(cursor, sums.data(), sums.size() * sizeof(std::uint64_t));
  store<std::uint64_t>(index.data() + kChecksumOffset, index_checksum(index));

  TempOutputFile idx(idx_path + ".tmp");
  idx.write(index.data(), index.size());
  bin.finish();
  idx.finish();

  // The old index goes first: between the two renames the new .bin must not sit next to an old
  // .idx that happens to describe the same number of tokens.
  std::error_code ec;
  std::filesystem::remove(idx_path, ec);
  if (ec) fail("{}: cannot remove the old index: {}", idx_path, ec.message());
  bin.rename_to(bin_path);
  idx.rename_to(idx_path);
  sync_directory_of(idx_path);
}

}  // namespace odc::data
