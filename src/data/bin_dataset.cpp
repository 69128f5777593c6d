// Binary token dataset (see odc/data/bin_dataset.h for the format): the reader maps both files and
// validates every field before handing out a span, so a truncated or corrupted pair is an
// odc::Error naming the file, never an out-of-bounds read (the writer: bin_dataset_writer.cpp).
#include "odc/data/bin_dataset.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <string_view>

#include "bin_format.h"
#include "odc/core/error.h"
#include <spdlog/spdlog.h>

namespace odc::data {

using namespace bin_index;

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

bool ends_with(const std::string& text, std::string_view suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

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

}  // namespace odc::data
