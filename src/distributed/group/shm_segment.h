#pragma once
// The shared-memory segment of a ShmHostGroup (private to src/distributed): its layout, the
// process-shared atomics in it, and how rank 0 creates it and the other ranks open it.
//
// Layout: Header | RankSlot x size | two round buffers, each holding per rank a ChunkHeader and
// chunk_bytes of payload. Exchanges use the buffers alternately (round % 2), so a rank may write
// round r + 1 while a slower one still reads round r; it writes round r + 2 only after everyone
// arrived at r + 1, i.e. finished reading r.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "odc/distributed/group/shared_segment.h"

namespace odc::distributed::shm {

static_assert(std::atomic<std::uint64_t>::is_always_lock_free,
              "process-shared atomics need a lock-free std::atomic<std::uint64_t>");

inline constexpr std::uint64_t kMagic = 0x3130475348434f44;  // "ODCSHG01"
inline constexpr std::uint64_t kVersion = 1;
inline constexpr std::size_t kLabelBytes = 1024;

// Text one process writes while others may read it (a sequence lock over atomic words, so neither
// side ever touches non-atomic shared bytes).
template <std::size_t Words>
struct SharedText {
  std::atomic<std::uint64_t> sequence{0};  // odd while a write is under way
  std::atomic<std::uint64_t> length{0};
  std::atomic<std::uint64_t> words[Words]{};

  // One writer at a time (a rank's own activity; the abort message behind its compare-exchange).
  void write(std::string_view text) {
    // Sequentially consistent throughout (no fences: ThreadSanitizer does not model them), so a
    // reader that sees the same even sequence before and after read every word of one write.
    const std::size_t n = std::min(text.size(), Words * 8);
    const std::uint64_t s = sequence.load();
    sequence.store(s + 1);
    for (std::size_t w = 0; w < (n + 7) / 8; ++w) {
      std::uint64_t word = 0;
      std::memcpy(&word, text.data() + 8 * w, std::min<std::size_t>(8, n - 8 * w));
      words[w].store(word);
    }
    length.store(n);
    sequence.store(s + 2);
  }
  // A consistent copy; gives up retrying after a while (a writer that died mid-write).
  std::string read() const {
    std::string text;
    for (int attempt = 0; attempt < 1000; ++attempt) {
      const std::uint64_t before = sequence.load();
      const std::size_t n = std::min<std::uint64_t>(length.load(), Words * 8);
      text.resize(n);
      for (std::size_t w = 0; w < (n + 7) / 8; ++w) {
        const std::uint64_t word = words[w].load();
        std::memcpy(text.data() + 8 * w, &word, std::min<std::size_t>(8, n - 8 * w));
      }
      if (before % 2 == 0 && sequence.load() == before) break;
    }
    return text;
  }
};

enum RankState : std::uint64_t { kAbsent = 0, kJoined = 1, kLeft = 2 };

struct alignas(64) RankSlot {
  std::atomic<std::uint64_t> pid{0};  // set when the rank joins
  std::atomic<std::uint64_t> state{kAbsent};
  alignas(64) std::atomic<std::uint64_t> arrived{0};  // the last round this rank arrived at
  SharedText<32> activity;                             // what it last announced (up to 256 bytes)
};

inline constexpr std::uint64_t kAbortWriting = ~std::uint64_t{0};

struct alignas(64) Header {
  std::atomic<std::uint64_t> magic{0};  // stored last by the creator
  std::uint64_t version = kVersion;
  std::uint64_t size = 0;
  std::uint64_t chunk_bytes = 0;
  std::uint64_t total_bytes = 0;
  std::atomic<std::uint64_t> creator_pid{0};
  std::atomic<std::uint64_t> joined{0};
  // 0, kAbortWriting while the message is written, then the rank + 1 that gave up first.
  std::atomic<std::uint64_t> aborted_by{0};
  SharedText<128> abort_message;
};

// What a rank writes before its payload in each round's buffer (read by others only after they
// saw its arrival, so plain bytes).
struct ChunkHeader {
  std::uint64_t total = 0;  // bytes this rank contributes to the whole exchange
  std::uint64_t label_length = 0;
  char label[kLabelBytes] = {};
};

// The chunk of payload per rank and round for a group of `size` ranks: ~8 MiB per buffer in all,
// between 64 KiB and 1 MiB per rank.
std::uint64_t default_chunk_bytes(int size);

// Pauses between polls of a wait: yields at first, then sleeps 10 us doubling to 1 ms, so an idle
// wait does not burn a core.
class Backoff {
 public:
  void pause();

 private:
  int yields_ = 0;
  long sleep_ns_ = 10'000;
};

using Clock = std::chrono::steady_clock;

// When a wait ends, and the timeout it came from (for messages).
struct Deadline {
  Clock::time_point at;
  double timeout_s = 0.0;
};

class Segment {
 public:
  // Rank 0: creates the segment `name` for `size` ranks. A segment of that name whose creator
  // has exited (an earlier job that died) is removed and replaced; one whose creator is alive is
  // an error. `job` names the job in messages.
  static std::unique_ptr<Segment> create(const std::string& name, std::string_view job, int size, Deadline deadline);
  // The other ranks: opens the segment once rank 0 has created it, retrying until `deadline`.
  static std::unique_ptr<Segment> open(const std::string& name, std::string_view job, int rank, int size,
                                       Deadline deadline);
  // Unmaps; the creator also removes the name if it still exists (the SharedSegment's).
  ~Segment() = default;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  Header& header() const { return *header_; }
  RankSlot& slot(int rank) const { return slots_[rank]; }
  ChunkHeader& chunk_header(std::uint64_t round, int rank) const;
  std::byte* chunk_data(std::uint64_t round, int rank) const;
  // Removes the name (rank 0, once every rank has mapped the segment); idempotent.
  void unlink();

 private:
  explicit Segment(SharedSegment memory) : memory_(std::move(memory)) {}
  void* base() const { return memory_.data(); }

  SharedSegment memory_;
  Header* header_ = nullptr;
  RankSlot* slots_ = nullptr;
  std::byte* buffers_ = nullptr;
  std::size_t stride_ = 0;  // bytes per rank in a round buffer
  int size_ = 0;
};

}  // namespace odc::distributed::shm
