#pragma once
// The binary dataset's index layout (odc/data/bin_dataset.h describes the format), shared by its
// reader (bin_dataset.cpp) and its writer (bin_dataset_writer.cpp): the magic, versions, header
// offsets, the payload chunk size, and the index's size and checksum.
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "odc/core/hash.h"

namespace odc::data::bin_index {

// Tokens and index fields are used in place from the mapping; the format is little-endian.
static_assert(std::endian::native == std::endian::little,
              "the binary dataset format is mapped in place and assumes a little-endian host");

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
inline T load(const std::byte* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

template <typename T>
inline void store(std::byte* p, T value) {
  std::memcpy(p, &value, sizeof(T));
}

// The whole index except the checksum field itself, so a flipped header field (and, in version
// 2, a flipped payload checksum) is caught too.
inline std::uint64_t index_checksum(std::span<const std::byte> index) {
  Fnv1a hash;
  hash.add(index.data(), kChecksumOffset);
  hash.add(index.data() + kChecksumOffset + 8, index.size() - kChecksumOffset - 8);
  return hash.value();
}

inline std::uint64_t index_bytes(std::size_t header_bytes, std::int64_t count, std::int64_t spans,
                          std::uint64_t chunks) {
  return header_bytes + 16 * static_cast<std::uint64_t>(count + 1) +
         8 * static_cast<std::uint64_t>(spans) + 8 * chunks;
}

inline std::uint64_t chunk_count(std::int64_t total_tokens, std::int64_t chunk_bytes) {
  const auto bytes = 4 * static_cast<std::uint64_t>(total_tokens);
  return (bytes + static_cast<std::uint64_t>(chunk_bytes) - 1) / static_cast<std::uint64_t>(chunk_bytes);
}

}  // namespace odc::data::bin_index
