#pragma once
// One rank's master shard of a native checkpoint (io/native_checkpoint.h), read front to back a
// range at a time with pread: neither mapped nor held, so streaming every rank's masters into a
// Hugging Face directory (odc-ckpt export) holds a chunk, not the model. What read_rank_shards
// checks is checked as the bytes go by: the tensors' lengths when opened, each master's
// finiteness as it is read, and the file's content checksum in finish(), which reads the rest
// (the AdamW moments) to complete it.
#include <cstdint>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include "odc/core/file_descriptor.h"
#include "odc/core/hash.h"

namespace odc::io {

class RankMastersReader {
 public:
  // Rank `rank`'s file of the checkpoint whose manifest is `manifest`; every tensor must hold
  // `owned` fp32 elements (the shard layout's owned_elements).
  RankMastersReader(const std::string& checkpoint, const nlohmann::json& manifest, int rank, std::int64_t owned);
  RankMastersReader(const RankMastersReader&) = delete;
  RankMastersReader& operator=(const RankMastersReader&) = delete;

  // The next out.size() masters.
  void read(std::span<float> out);
  // After the last master: odc::Error unless the file's checksum is the manifest's.
  void finish();

 private:
  // Reads `bytes` at file offset `at` into `out`, adding them to the checksum.
  void read_bytes(std::uint64_t at, std::size_t bytes, void* out);

  std::string checkpoint_;
  std::string path_;
  std::string expected_;              // the manifest's checksum
  FileDescriptor fd_;
  std::uint64_t starts_[3] = {0, 0, 0};  // of each tensor's bytes in the file
  std::int64_t owned_ = 0;
  std::int64_t next_ = 0;             // masters read so far
  Fnv1a checksum_;
};

}  // namespace odc::io
