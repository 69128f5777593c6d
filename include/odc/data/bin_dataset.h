#pragma once
// Binary token dataset (format "bin"): two files sharing a PREFIX, mapped read-only so opening a
// dataset of 100M tokens costs a validation scan, not a parse.
//
// PREFIX.bin: raw little-endian uint32 token ids, every sequence back to back.
// PREFIX.idx: little-endian, 8-byte aligned throughout:
//   header (56 bytes; 48 in version 1)
//     char[8]  magic "ODCIDX\x01\x00"
//     uint32   version (= 2; 1 is still read)
//     uint32   flags (= 0; reserved, nonzero is rejected so a future feature is never misread)
//     int64    sequence count N (>= 1)
//     int64    total tokens T (PREFIX.bin holds exactly 4*T bytes)
//     int64    total target spans S
//     uint64   checksum: FNV-1a 64 (odc/core/hash.h) of the whole index except these 8 bytes
//     int64    (version 2) chunk size B of the payload checksums, in bytes (the writer: 1 MiB)
//   int64      token offsets[N+1] into PREFIX.bin (in tokens): 0, ..., T, strictly increasing
//   int64      span offsets[N+1] into the span array: 0, ..., S, non-decreasing
//   uint32[2]  spans[S]: (start, length) of a run of target positions (loss_mask == 1) within its
//              sequence; sorted, non-overlapping, length >= 1
//   uint64     (version 2) payload checksums[ceil(4T / B)]: bin_payload_checksum of PREFIX.bin's
//              bytes [kB, min((k+1)B, 4T)) for chunk k
//
// Everything is validated on open (sizes, checksums, offsets, spans, token ids < vocab_size);
// every problem is an odc::Error naming the file and what is wrong, a damaged .bin also its byte,
// token and sequence range. The payload checksums are verified at open, in the pass that checks
// the token ids (which reads every byte anyway). A version 1 pair (no payload checksums) is read
// with a warning that names the command rewriting it as version 2. Target masks are materialized
// eagerly at open into one byte per token (the interface hands out spans, which need stable
// storage); tokens are spans straight into the mapping, never copied. The writer:
// odc/data/bin_dataset_writer.h.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "odc/data/dataset.h"
#include "odc/data/mapped_file.h"

namespace odc::data {

class BinTokenDataset final : public TokenDataset {
 public:
  // `path` may be the PREFIX itself or PREFIX.bin / PREFIX.idx. Token ids must lie in
  // [0, vocab_size).
  BinTokenDataset(const std::string& path, std::int64_t vocab_size);

  std::int64_t size() const override { return static_cast<std::int64_t>(offsets_.size()) - 1; }
  SequenceView get(std::int64_t index) const override;
  std::int64_t length(std::int64_t index) const override;
  std::int64_t target_count(std::int64_t index) const override;  // O(1), computed at open
  std::string describe() const override;
  std::string record(std::int64_t index) const override;  // "PREFIX.idx: sequence i" (0-based)

  const std::string& prefix() const { return prefix_; }
  std::int64_t total_tokens() const { return static_cast<std::int64_t>(masks_.size()); }

 private:
  // odc::Error naming the first chunk of PREFIX.bin whose bytes do not hash to its checksum.
  void verify_payload(std::span<const std::uint64_t> sums, std::int64_t chunk_bytes) const;

  std::string prefix_;
  MappedFile index_file_;
  MappedFile token_file_;
  std::span<const std::int64_t> offsets_;  // into index_file_, size()+1 entries
  std::span<const std::int32_t> tokens_;   // into token_file_ (ids < vocab_size <= INT32_MAX)
  std::vector<std::uint8_t> masks_;        // eager: one byte per token
  std::vector<std::int64_t> target_counts_;
};

// The checksum of one chunk of PREFIX.bin (version 2): a 64-bit hash of 8-byte words in four
// lanes that always changes when the bytes of one word do. Not for security.
std::uint64_t bin_payload_checksum(std::span<const std::byte> bytes);

// Strips a trailing ".bin" or ".idx", so "x", "x.bin" and "x.idx" all name the pair with prefix x.
std::string bin_dataset_prefix(const std::string& path);

}  // namespace odc::data
