#include "odc/io/rank_masters_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "odc/core/error.h"
#include "odc/io/native_checkpoint.h"
#include "odc/io/safetensors.h"

namespace odc::io {

namespace {
// The moments are read only for the checksum, through a buffer of this many bytes.
constexpr std::size_t kChecksumChunk = std::size_t{4} << 20;

const nlohmann::json& rank_entry(const nlohmann::json& manifest, int rank) {
  return manifest["ranks"].at(static_cast<std::size_t>(rank));
}
}  // namespace

RankMastersReader::RankMastersReader(const std::string& checkpoint, const nlohmann::json& manifest, int rank,
                                     std::int64_t owned)
    : checkpoint_(checkpoint),
      path_((std::filesystem::path(checkpoint) / rank_entry(manifest, rank).at("file").get<std::string>()).string()),
      expected_(rank_entry(manifest, rank).at("checksum").get<std::string>()),
      fd_(::open(path_.c_str(), O_RDONLY | O_CLOEXEC)),
      owned_(owned) {
  // The header is all that is read through the mapping (its pages alone become resident).
  std::optional<SafetensorsFile> opened;
  try {
    opened.emplace(path_);
  } catch (const Error& e) {
    fail("{}{}", e.what(), previous_checkpoint_hint(checkpoint));
  }
  for (int i = 0; i < 3; ++i) {
    const auto& info = opened->info(kRankTensorNames[i]);
    if (info.dtype != DType::f32 || info.numel() != owned) {
      fail("checkpoint '{}': tensor '{}' holds {} elements, this rank's shards need {} (a different model or "
           "world size?)", path_, kRankTensorNames[i], info.numel(), owned);
    }
    starts_[i] = opened->data_start() + info.begin;
  }
  if (fd_.get() < 0) fail("checkpoint '{}': cannot open: {}", path_, std::strerror(errno));
}

void RankMastersReader::read_bytes(std::uint64_t at, std::size_t bytes, void* out) {
  auto* p = static_cast<char*>(out);
  for (std::size_t left = bytes; left > 0;) {
    const ssize_t got = ::pread(fd_.get(), p, left, static_cast<off_t>(at));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      fail("checkpoint '{}': cannot read {} bytes at {}: {}{}", path_, left, at,
           got < 0 ? std::strerror(errno) : "the file ends there", previous_checkpoint_hint(checkpoint_));
    }
    p += got;
    at += static_cast<std::uint64_t>(got);
    left -= static_cast<std::size_t>(got);
  }
  checksum_.add(out, bytes);
}

void RankMastersReader::read(std::span<float> out) {
  const auto count = static_cast<std::int64_t>(out.size());
  if (count > owned_ - next_) {
    fail("checkpoint '{}': {} masters asked for after {} of {}", path_, count, next_, owned_);
  }
  read_bytes(starts_[0] + static_cast<std::uint64_t>(next_) * sizeof(float), out.size_bytes(), out.data());
  // A NaN or inf saved by a run that diverged would only show as a NaN loss in the exported model.
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) {
      fail("checkpoint '{}': tensor 'masters' holds a non-finite value ({} at element {}): the run that saved it had "
           "diverged; export an earlier checkpoint{}", path_, out[i], next_ + static_cast<std::int64_t>(i),
           previous_checkpoint_hint(checkpoint_));
    }
  }
  next_ += count;
}

void RankMastersReader::finish() {
  if (next_ != owned_) fail("checkpoint '{}': finished after {} of {} masters", path_, next_, owned_);
  std::vector<char> buffer(kChecksumChunk);
  const std::uint64_t bytes = static_cast<std::uint64_t>(owned_) * sizeof(float);
  for (int i = 1; i < 3; ++i) {
    for (std::uint64_t done = 0; done < bytes;) {
      const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(buffer.size(), bytes - done));
      read_bytes(starts_[i] + done, n, buffer.data());
      done += n;
    }
  }
  const std::string actual = fmt::format("{:016x}", checksum_.value());
  if (actual != expected_) {
    fail("checkpoint '{}': checksum {} does not match the manifest's {} (the file is damaged){}", path_, actual,
         expected_, previous_checkpoint_hint(checkpoint_));
  }
}

}  // namespace odc::io
