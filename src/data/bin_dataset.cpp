// Binary token dataset (see odc/data/bin_dataset.h for the format): the reader maps both files and
// validates every field before handing out a span, so a truncated or corrupted pair is an
// odc::Error naming the file, never an out-of-bounds read; the writer builds the index in memory
// and publishes both files atomically.
#include "odc/data/bin_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <utility>

#include "odc/core/error.h"
#include "odc/core/file_descriptor.h"
#include "odc/core/hash.h"
#include <spdlog/spdlog.h>

namespace odc::data {

// Tokens and index fields are used in place from the mapping; the format is little-endian.
static_assert(std::endian::native == std::endian::little,
              "the binary dataset format is mapped in place and assumes a little-endian host");

namespace {

constexpr std::array<char, 8> kMagic = {'O', 'D', 'C', 'I', 'D', 'X', '\x01', '\x00'};
// Version 2 adds checksums of the token payload (PREFIX.bin) per chunk; version 1 is still read.
constexpr std::uint32_t kVersion = 2;
constexpr std::uint32_t kOldestVersion = 1;
constexpr std::size_t kHeaderBytesV1 = 48;
constexpr std::size_t kHeaderBytes = 56;
constexpr std::size_t kChecksumOffset = 40;
constexpr std::size_t kChunkBytesOffset = 48;
// 1 MiB of tokens per payload checksum: a 4 GiB .bin carries 32 KiB of them, and a damaged byte
// is located to 262144 tokens.
constexpr std::int64_t kChunkBytes = std::int64_t{1} << 20;
// Far beyond any real dataset, and small enough that the index size computation cannot overflow.
constexpr std::int64_t kMaxEntries = std::int64_t{1} << 56;

struct IndexHeader {
  std::uint32_t version = 0;
  std::uint32_t flags = 0;
  std::int64_t count = 0;
  std::int64_t total_tokens = 0;
  std::int64_t total_spans = 0;
  std::uint64_t checksum = 0;
  std::int64_t chunk_bytes = 0;  // version 2: bytes of PREFIX.bin per payload checksum
};

template <typename T>
T load(const std::byte* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

template <typename T>
void store(std::byte* p, T value) {
  std::memcpy(p, &value, sizeof(T));
}

// The whole index except the checksum field itself, so a flipped header field (and, in version
// 2, a flipped payload checksum) is caught too.
std::uint64_t index_checksum(std::span<const std::byte> index) {
  Fnv1a hash;
  hash.add(index.data(), kChecksumOffset);
  hash.add(index.data() + kChecksumOffset + 8, index.size() - kChecksumOffset - 8);
  return hash.value();
}

std::uint64_t index_bytes(std::size_t header_bytes, std::int64_t count, std::int64_t spans,
                          std::uint64_t chunks) {
  return header_bytes + 16 * static_cast<std::uint64_t>(count + 1) +
         8 * static_cast<std::uint64_t>(spans) + 8 * chunks;
}

std::uint64_t chunk_count(std::int64_t total_tokens, std::int64_t chunk_bytes) {
  const auto bytes = 4 * static_cast<std::uint64_t>(total_tokens);
  return (bytes + static_cast<std::uint64_t>(chunk_bytes) - 1) / static_cast<std::uint64_t>(chunk_bytes);
}

}  // namespace

// Four lanes over 8-byte words, each h = (h ^ word) * odd: every step is a bijection of h, so a
// change confined to one word (any bit flips within 8 bytes) always changes the result, and the
// lanes' multiplies overlap (several times FNV-1a's byte-at-a-time speed: the check runs once at
// open over every byte). A tail of 4 bytes is zero-padded; the length is mixed in.
std::uint64_t bin_payload_checksum(std::span<const std::byte> bytes) {
  constexpr std::uint64_t kPrime = 1099511628211ull;
  std::array<std::uint64_t, 4> lane = {1469598103934665603ull, 0x9e3779b97f4a7c15ull, 0xbf58476d1ce4e5b9ull, 0x94d049bb133111ebull};
  const std::byte* p = bytes.data();
  std::size_t words = bytes.size() / 8;
  for (; words >= 4; words -= 4, p += 32) {
    for (std::size_t l = 0; l < 4; ++l) lane[l] = (lane[l] ^ load<std::uint64_t>(p + 8 * l)) * kPrime;
  }
  for (std::size_t l = 0; words > 0; --words, ++l, p += 8) {
    lane[l] = (lane[l] ^ load<std::uint64_t>(p)) * kPrime;
  }
  std::uint64_t tail = 0;
  std::memcpy(&tail, p, bytes.size() % 8);
  std::uint64_t h = (lane[0] ^ tail) * kPrime;
  for (std::size_t l = 1; l < 4; ++l) {
    h = (h ^ lane[l]) * kPrime;
    h ^= h >> 29;
  }
  return (h ^ bytes.size()) * kPrime;
}

namespace {

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

bool ends_with(const std::string& text, std::string_view suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

// ---- MappedFile ----

MappedFile::MappedFile(const std::string& path) {
  const FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail("{}: cannot stat: {}", path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail("{}: not a regular file", path);
  size_ = static_cast<std::size_t>(st.st_size);
  if (size_ == 0) return;  // mmap rejects zero lengths; an empty span says the same thing
  void* base = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (base == MAP_FAILED) fail("{}: mmap failed: {}", path, std::strerror(errno));
  data_ = static_cast<const std::byte*>(base);
}

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void MappedFile::release() noexcept {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

// ---- reader ----

std::string bin_dataset_prefix(const std::string& path) {
  if (ends_with(path, ".bin") || ends_with(path, ".idx")) return path.substr(0, path.size() - 4);
  return path;
}

BinTokenDataset::BinTokenDataset(const std::string& path, std::int64_t vocab_size)
    : prefix_(bin_dataset_prefix(path)),
      index_file_(prefix_ + ".idx"),
      token_file_(prefix_ + ".bin") {
  const std::string idx_path = prefix_ + ".idx";
  const std::string bin_path = prefix_ + ".bin";
  // Token ids are handed out as int32, so a larger vocabulary could not be represented anyway.
  if (vocab_size <= 0 || vocab_size > std::numeric_limits<std::int32_t>::max()) {
    fail("{}: vocab size must be in [1, {}], got {}", bin_path,
         std::numeric_limits<std::int32_t>::max(), vocab_size);
  }

  // -- header --
  const std::span<const std::byte> index = index_file_.bytes();
  if (index.size() < kHeaderBytesV1) {
    fail("{}: truncated header: {} bytes, expected at least {}", idx_path, index.size(), kHeaderBytesV1);
  }
  if (std::memcmp(index.data(), kMagic.data(), kMagic.size()) != 0) {
    fail("{}: wrong magic (expected \"ODCIDX\\x01\\x00\"): not an odc binary dataset index",
         idx_path);
  }
  IndexHeader header;
  header.version = load<std::uint32_t>(index.data() + 8);
  header.flags = load<std::uint32_t>(index.data() + 12);
  header.count = load<std::int64_t>(index.data() + 16);
  header.total_tokens = load<std::int64_t>(index.data() + 24);
  header.total_spans = load<std::int64_t>(index.data() + 32);
  header.checksum = load<std::uint64_t>(index.data() + kChecksumOffset);
  if (header.version < kOldestVersion || header.version > kVersion) {
    fail("{}: unknown format version {} (this build reads versions {} to {})", idx_path,
         header.version, kOldestVersion, kVersion);
  }
  const std::size_t header_bytes = header.version == 1 ? kHeaderBytesV1 : kHeaderBytes;
  if (index.size() < header_bytes) {
    fail("{}: truncated header: {} bytes, expected at least {}", idx_path, index.size(), header_bytes);
  }
  if (header.flags != 0) {
    fail("{}: unknown flags {:#x} (version {} defines none)", idx_path, header.flags, header.version);
  }
  if (header.version >= 2) {
    header.chunk_bytes = load<std::int64_t>(index.data() + kChunkBytesOffset);
    // Whole tokens per chunk, and never so small that the chunk count could overflow the index.
    if (header.chunk_bytes < 4096 || header.chunk_bytes % 8 != 0 || header.chunk_bytes > (std::int64_t{1} << 40)) {
      fail("{}: payload chunk size {} bytes in the header is not a multiple of 8 in [4096, 2^40]",
           idx_path, header.chunk_bytes);
    }
  }
  if (header.count < 1 || header.count > kMaxEntries) {
    fail("{}: sequence count {} in the header is out of range [1, {}]", idx_path, header.count,
         kMaxEntries);
  }
  if (header.total_tokens < header.count || header.total_tokens > kMaxEntries) {
    fail("{}: total token count {} in the header is out of range [{} (one per sequence), {}]",
         idx_path, header.total_tokens, header.count, kMaxEntries);
  }
  if (header.total_spans < 0 || header.total_spans > kMaxEntries) {
    fail("{}: target span count {} in the header is out of range [0, {}]", idx_path,
         header.total_spans, kMaxEntries);
  }
  const std::uint64_t chunks =
      header.version >= 2 ? chunk_count(header.total_tokens, header.chunk_bytes) : 0;
  const std::uint64_t expected_bytes =
      index_bytes(header_bytes, header.count, header.total_spans, chunks);
  if (index.size() < expected_bytes) {
    fail("{}: truncated index: {} sequences and {} target spans need {} bytes, the file has {}",
         idx_path, header.count, header.total_spans, expected_bytes, index.size());
  }
  if (index.size() > expected_bytes) {
    fail("{}: {} trailing bytes after the index ({} sequences and {} target spans need {} bytes)",
         idx_path, index.size() - expected_bytes, header.count, header.total_spans,
         expected_bytes);
  }
  if (const std::uint64_t actual = index_checksum(index); actual != header.checksum) {
    fail("{}: checksum mismatch (header says {:#018x}, contents hash to {:#018x}): the index is "
         "corrupted",
         idx_path, header.checksum, actual);
  }

  // -- offsets (8-byte aligned: the mapping is page-aligned and every section a multiple of 8) --
  const auto entries = static_cast<std::size_t>(header.count) + 1;
  offsets_ = {reinterpret_cast<const std::int64_t*>(index.data() + header_bytes), entries};
  const std::span<const std::int64_t> span_offsets(offsets_.data() + entries, entries);
  const auto* spans = reinterpret_cast<const std::uint32_t*>(span_offsets.data() + entries);

  if (offsets_[0] != 0) fail("{}: token offset of sequence 0 is {}, expected 0", idx_path, offsets_[0]);
  if (span_offsets[0] != 0) {
    fail("{}: span offset of sequence 0 is {}, expected 0", idx_path, span_offsets[0]);
  }
  for (std::size_t i = 0; i + 1 < entries; ++i) {
    const std::int64_t begin = offsets_[i];
    const std::int64_t end = offsets_[i + 1];
    if (end > header.total_tokens) {
      fail("{}: end offset {} of sequence {} is past the end of {} ({} tokens)", idx_path, end, i,
           bin_path, header.total_tokens);
    }
    if (end == begin) fail("{}: sequence {} has zero length (offset {})", idx_path, i, begin);
    if (end < begin) {
      fail("{}: token offsets are not monotonic: sequence {} ends at {} but starts at {}",
           idx_path, i, end, begin);
    }
    if (span_offsets[i + 1] < span_offsets[i] || span_offsets[i + 1] > header.total_spans) {
      fail("{}: span offsets of sequence {} are [{}, {}), expected a non-decreasing range "
           "within [0, {}]",
           idx_path, i, span_offsets[i], span_offsets[i + 1], header.total_spans);
    }
  }
  if (offsets_.back() != header.total_tokens) {
    fail("{}: the last sequence ends at {} but the header says {} tokens", idx_path,
         offsets_.back(), header.total_tokens);
  }
  if (span_offsets.back() != header.total_spans) {
    fail("{}: the last sequence's spans end at {} but the header says {} spans", idx_path,
         span_offsets.back(), header.total_spans);
  }

  // -- tokens --
  const auto expected_bin = 4 * static_cast<std::uint64_t>(header.total_tokens);
  if (token_file_.size() != expected_bin) {
    fail("{}: size {} bytes does not match the index ({} tokens x 4 = {} bytes){}", bin_path,
         token_file_.size(), header.total_tokens, expected_bin,
         token_file_.size() < expected_bin ? ": truncated" : "");
  }
  tokens_ = {reinterpret_cast<const std::int32_t*>(token_file_.bytes().data()),
             static_cast<std::size_t>(header.total_tokens)};
  const auto* raw_tokens = reinterpret_cast<const std::uint32_t*>(token_file_.bytes().data());
  const auto vocab = static_cast<std::uint32_t>(vocab_size);

  // -- payload checksums (version 2), before the token ids: a flipped bit is named as damage,
  // not as whatever out-of-range id it happens to make. Every byte is read at open anyway (the
  // id range check below), so checking here costs the hashing only, not another read.
  if (header.version >= 2) {
    const auto* sums = reinterpret_cast<const std::uint64_t*>(index.data() + expected_bytes - 8 * chunks);
    verify_payload(std::span<const std::uint64_t>(sums, chunks), header.chunk_bytes);
  } else {
    spdlog::warn("{}: format version 1 has no checksums of the token file, so damage to {} would go undetected; "
                 "rewrite the pair as version 2 with: odc-data convert --format bin --in {} --out {}",
                 idx_path, bin_path, prefix_, prefix_);
  }

  // -- one pass per sequence: token ids in range, spans valid, masks and target counts --
  masks_.assign(static_cast<std::size_t>(header.total_tokens), 0);
  target_counts_.resize(static_cast<std::size_t>(header.count));
  for (std::size_t i = 0; i + 1 < entries; ++i) {
    const auto begin = static_cast<std::size_t>(offsets_[i]);
    const auto length = static_cast<std::size_t>(offsets_[i + 1] - offsets_[i]);
    // A branch-free max lets the compiler vectorize the common (valid) case.
    std::uint32_t largest = 0;
    for (std::size_t j = 0; j < length; ++j) largest = std::max(largest, raw_tokens[begin + j]);
    if (largest >= vocab) {
      for (std::size_t j = 0; j < length; ++j) {
        if (raw_tokens[begin + j] >= vocab) {
          fail("{}: token id {} at position {} of sequence {} is out of range [0, {})", bin_path,
               raw_tokens[begin + j], j, i, vocab_size);
        }
      }
    }

    std::int64_t targets = 0;
    std::uint64_t previous_end = 0;
    for (auto s = span_offsets[i]; s < span_offsets[i + 1]; ++s) {
      const std::uint32_t start = spans[2 * s];
      const std::uint32_t count = spans[2 * s + 1];
      const std::uint64_t end = std::uint64_t{start} + count;
      if (count == 0) fail("{}: span {} of sequence {} has zero length", idx_path, s, i);
      if (end > length) {
        fail("{}: span {} of sequence {} covers [{}, {}), out of the sequence's range [0, {})",
             idx_path, s, i, start, end, length);
      }
      if (start < previous_end) {
        fail("{}: span {} of sequence {} starts at {}, before the previous span ends at {} "
             "(spans must be sorted and non-overlapping)",
             idx_path, s, i, start, previous_end);
      }
      previous_end = end;
      std::fill_n(masks_.begin() + static_cast<std::ptrdiff_t>(begin + start), count,
                  std::uint8_t{1});
      // Position 0 is never predicted (nothing precedes it), so its mask does not count.
      targets += static_cast<std::int64_t>(count) - (start == 0 ? 1 : 0);
    }
    target_counts_[i] = targets;
  }
}

void BinTokenDataset::verify_payload(std::span<const std::uint64_t> sums, std::int64_t chunk_bytes) const {
  const std::span<const std::byte> payload = token_file_.bytes();
  const auto step = static_cast<std::size_t>(chunk_bytes);
  for (std::size_t k = 0; k < sums.size(); ++k) {
    const std::size_t begin = k * step;
    const std::size_t end = std::min(payload.size(), begin + step);
    if (bin_payload_checksum(payload.subspan(begin, end - begin)) == sums[k]) continue;
    // The sequences overlapping the chunk: the first whose end lies past its first token, through
    // the one holding its last token.
    const auto first_token = static_cast<std::int64_t>(begin / 4);
    const auto last_token = static_cast<std::int64_t>(end / 4) - 1;
    const auto first = std::upper_bound(offsets_.begin(), offsets_.end(), first_token) - offsets_.begin() - 1;
    const auto last = std::upper_bound(offsets_.begin(), offsets_.end(), last_token) - offsets_.begin() - 1;
    fail("{}.bin: bytes [{}, {}) (tokens [{}, {}), sequences {} to {}) do not match their checksum in {}.idx "
         "(chunk {} of {}): the token file is damaged; restore it or rebuild the pair with odc-data convert",
         prefix_, begin, end, first_token, last_token + 1, first, last, prefix_, k, sums.size());
  }
}

SequenceView BinTokenDataset::get(std::int64_t index) const {
  ODC_CHECK(index >= 0 && index < size(), "index {} of {}", index, describe());
  const auto begin = static_cast<std::size_t>(offsets_[static_cast<std::size_t>(index)]);
  const auto count = static_cast<std::size_t>(length(index));
  return SequenceView{tokens_.subspan(begin, count),
                      std::span<const std::uint8_t>(masks_).subspan(begin, count)};
}

std::int64_t BinTokenDataset::length(std::int64_t index) const {
  ODC_CHECK(index >= 0 && index < size(), "index {} of {}", index, describe());
  const auto i = static_cast<std::size_t>(index);
  return offsets_[i + 1] - offsets_[i];
}

std::int64_t BinTokenDataset::target_count(std::int64_t index) const {
  ODC_CHECK(index >= 0 && index < size(), "index {} of {}", index, describe());
  return target_counts_[static_cast<std::size_t>(index)];
}

std::string BinTokenDataset::record(std::int64_t index) const {
  return fmt::format("{}.idx: sequence {}", prefix_, index);
}

std::string BinTokenDataset::describe() const {
  return fmt::format("{}.bin ({} sequences, {} tokens)", prefix_, size(), total_tokens());
}

// ---- writer ----

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
