// libFuzzer target: arbitrary bytes as a binary dataset (data.format bin: PREFIX.idx + PREFIX.bin,
// odc/data/bin_dataset.h). The reader takes a path, so the pair is written to a per-process scratch
// directory (fuzz_support.h) that every iteration overwrites. Input layout:
//   byte 0        control bits (below)
//   bytes 1..2    little-endian length L of the index part
//   next L bytes  PREFIX.idx (fewer when the input is shorter)
//   the rest      token bytes, used as PREFIX.bin as they are or cycled to the size the index asks
// Control bits, so that mutations reach past the header checks instead of dying on the magic and
// the checksum (each fix-up is optional, so the checks themselves are fuzzed too):
//   bit 0    write a valid magic, the version (bit 6) and flags 0 into the header
//   bit 1    recompute the header checksum over the (possibly fixed) index; version 2 (bits 0
//            and 6): first the payload checksums of the .bin, in the chunks of the smallest size
//            (4096 bytes), where the index's counts place them (the index grown to hold them)
//   bits 2-3 PREFIX.bin: 0 = the rest as is; 1 = the rest cycled to exactly 4 x total_tokens bytes
//            (zeros if there is no rest); 2 = one token more; 3 = one token fewer
//   bits 4-5 vocabulary: 256, 65536, 2^31-1 (every id a uint32 below 2^31), 7
//   bit 6    with bit 0: version 2 (a 56-byte header with the payload chunk size, then per-chunk
//            checksums of PREFIX.bin after the spans), else version 1
// Opening must succeed or throw odc::Error; a crash, an out-of-bounds read (ASan), UB, a leak, a
// hang or any other exception is a finding. A dataset that opens is read in full: every token and
// mask byte of every sequence it claims, with its promises checked (lengths, ids < vocab,
// target_count = set mask bits after position 0, spans within the .bin), and written back with the
// project's writer, which must read back the same sequences.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <string_view>

#include "fuzz_support.h"
#include "odc/core/error.h"
#include "odc/core/hash.h"
#include "odc/data/bin_dataset.h"

namespace {

constexpr std::size_t kHeaderBytes = 48;  // version 1; version 2 adds the chunk size
constexpr std::size_t kHeaderBytesV2 = 56;
constexpr std::size_t kChecksumOffset = 40;
constexpr std::int64_t kChunkBytes = 4096;  // the smallest chunk size the reader accepts
// Keeps one input's .bin small: a header may claim any token count.
constexpr std::int64_t kMaxCycledTokens = std::int64_t{1} << 20;

const odc::fuzz::ScratchDir& scratch() {
  static const odc::fuzz::ScratchDir dir("bin_index");
  return dir;
}

std::uint64_t checksum(const std::string& index) {
  odc::Fnv1a hash;
  hash.add(index.data(), kChecksumOffset);
  hash.add(index.data() + kChecksumOffset + 8, index.size() - kChecksumOffset - 8);
  return hash.value();
}

std::int64_t header_field(const std::string& index, std::size_t offset) {
  std::int64_t value = 0;
  std::memcpy(&value, index.data() + offset, sizeof(value));
  return value;
}

// Version 2: the chunk size, then the .bin's chunk checksums where the counts of the header place
// them (after the offsets and spans), the index grown or cut to end there. Counts too large to lay
// out are left alone (the reader must refuse them).
void write_payload_checksums(std::string& index, const std::string& bin) {
  std::memcpy(index.data() + kHeaderBytes, &kChunkBytes, sizeof(kChunkBytes));
  const std::int64_t sequences = header_field(index, 16);
  const std::int64_t spans = header_field(index, 32);
  if (sequences < 1 || sequences > (1 << 20) || spans < 0 || spans > (1 << 20)) return;
  const auto at = static_cast<std::size_t>(kHeaderBytesV2 + 16 * (sequences + 1) + 8 * spans);
  const std::size_t chunks = (bin.size() + kChunkBytes - 1) / kChunkBytes;
  index.resize(at + 8 * chunks, '\0');
  for (std::size_t k = 0; k < chunks; ++k) {
    const std::size_t begin = k * kChunkBytes;
    const std::size_t end = std::min(bin.size(), begin + kChunkBytes);
    const std::uint64_t sum = odc::data::bin_payload_checksum(
        std::span<const std::byte>(reinterpret_cast<const std::byte*>(bin.data()) + begin, end - begin));
    std::memcpy(index.data() + at + 8 * k, &sum, sizeof(sum));
  }
}

std::string token_file(std::uint8_t mode, std::string_view rest, const std::string& index) {
  if (mode == 0 || index.size() < kHeaderBytes) return std::string(rest);
  std::int64_t tokens = 0;
  std::memcpy(&tokens, index.data() + 24, sizeof(tokens));
  if (tokens < 1 || tokens > kMaxCycledTokens) return std::string(rest);
  if (mode == 2) ++tokens;
  if (mode == 3) --tokens;
  std::string bin(static_cast<std::size_t>(tokens) * 4, '\0');
  if (!rest.empty()) {
    for (std::size_t i = 0; i < bin.size(); ++i) bin[i] = rest[i % rest.size()];
  }
  return bin;
}

void read_everything(const odc::data::BinTokenDataset& dataset, std::int64_t vocab) {
  if (dataset.size() < 1) __builtin_trap();
  std::int64_t total = 0;
  std::uint64_t sink = 0;
  for (std::int64_t i = 0; i < dataset.size(); ++i) {
    const odc::data::SequenceView seq = dataset.get(i);
    const std::int64_t length = dataset.length(i);
    if (length < 1 || seq.tokens.size() != static_cast<std::size_t>(length) ||
        seq.target_mask.size() != seq.tokens.size()) {
      __builtin_trap();
    }
    for (const std::int32_t id : seq.tokens) {
      if (id < 0 || id >= vocab) __builtin_trap();
      sink += static_cast<std::uint32_t>(id);
    }
    for (const std::uint8_t m : seq.target_mask) {
      if (m > 1) __builtin_trap();
    }
    const auto targets = std::count_if(seq.target_mask.begin() + 1, seq.target_mask.end(),
                                       [](std::uint8_t m) { return m != 0; });
    if (targets != dataset.target_count(i)) __builtin_trap();
    total += length;
  }
  if (total != dataset.total_tokens()) __builtin_trap();
  (void)dataset.max_length();
  (void)dataset.describe();
  volatile std::uint64_t keep = sink;  // the token reads must not be optimized away
  (void)keep;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 3) return 0;
  const std::uint8_t control = data[0];
  const std::size_t declared = static_cast<std::size_t>(data[1]) | (static_cast<std::size_t>(data[2]) << 8);
  const std::string_view body(reinterpret_cast<const char*>(data) + 3, size - 3);
  std::string index(body.substr(0, std::min(declared, body.size())));
  const std::string_view rest = body.substr(index.size());

  const bool v2 = (control & 1) != 0 && (control & 64) != 0 && index.size() >= kHeaderBytesV2;
  if ((control & 1) != 0 && index.size() >= kHeaderBytes) {
    constexpr std::array<char, 8> kMagic = {'O', 'D', 'C', 'I', 'D', 'X', '\x01', '\x00'};
    const std::uint32_t version = v2 ? 2 : 1;
    const std::uint32_t flags = 0;
    std::memcpy(index.data(), kMagic.data(), kMagic.size());
    std::memcpy(index.data() + 8, &version, sizeof(version));
    std::memcpy(index.data() + 12, &flags, sizeof(flags));
  }
  // The .bin depends only on the header's token count, which the fix-ups below leave alone.
  const std::string bin = token_file(static_cast<std::uint8_t>((control >> 2) & 3), rest, index);
  if ((control & 2) != 0 && index.size() >= kHeaderBytes) {
    if (v2) write_payload_checksums(index, bin);
    const std::uint64_t sum = checksum(index);
    std::memcpy(index.data() + kChecksumOffset, &sum, sizeof(sum));
  }
  static constexpr std::array<std::int64_t, 4> kVocabs = {256, 65536, std::numeric_limits<std::int32_t>::max(), 7};
  const std::int64_t vocab = kVocabs[(control >> 4) & 3];

  const std::string prefix = scratch().file("data");
  scratch().write("data.idx", index);
  scratch().write("data.bin", bin);

  try {
    const odc::data::BinTokenDataset dataset(prefix, vocab);
    read_everything(dataset, vocab);
    try {
      odc::fuzz::check_binary_round_trip(dataset, vocab, scratch().file("rewritten"));
    } catch (const odc::Error&) {
      __builtin_trap();  // the writer refused (or misread) a dataset the reader accepted
    }
  } catch (const odc::Error& error) {
    odc::fuzz::check_rejection(error);
  }
  return 0;
}
