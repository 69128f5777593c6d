#include "shm_segment.h"

#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <new>
#include <thread>

#include <spdlog/spdlog.h>

#include "odc/core/error.h"
#include "odc/distributed/group/local_launch.h"

namespace odc::distributed::shm {
namespace {

constexpr std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

constexpr std::size_t kSlotsOffset = round_up(sizeof(Header), 64);
constexpr std::size_t kChunkDataOffset = round_up(sizeof(ChunkHeader), 64);

std::size_t stride_of(std::uint64_t chunk_bytes) { return round_up(kChunkDataOffset + chunk_bytes, 64); }

std::size_t buffers_offset(int size) { return kSlotsOffset + static_cast<std::size_t>(size) * sizeof(RankSlot); }

std::size_t segment_bytes(int size, std::uint64_t chunk_bytes) {
  return buffers_offset(size) + 2 * static_cast<std::size_t>(size) * stride_of(chunk_bytes);
}

// Who holds a segment name that rank 0 could not create.
struct Holder {
  enum State { gone, incomplete, live, dead } state = gone;
  std::uint64_t pid = 0;
};

Holder inspect(const std::string& name) {
  const auto segment = SharedSegment::try_open(name, "the local job's shared-memory segment");
  if (!segment) return {};
  if (segment->bytes() < sizeof(Header)) return {Holder::incomplete};
  const auto* header = std::launder(static_cast<const Header*>(segment->data()));
  Holder holder{Holder::incomplete};
  if (header->magic.load(std::memory_order_acquire) == kMagic) {
    holder.pid = header->creator_pid.load();
    holder.state = process_exited(holder.pid) ? Holder::dead : Holder::live;
  }
  return holder;
}

void pause_briefly() { std::this_thread::sleep_for(std::chrono::milliseconds(10)); }

}  // namespace

std::uint64_t default_chunk_bytes(int size) {
  const std::uint64_t per_rank = (std::uint64_t{8} << 20) / static_cast<std::uint64_t>(std::max(size, 1));
  return round_up(std::clamp<std::uint64_t>(per_rank, std::uint64_t{64} << 10, std::uint64_t{1} << 20), 64);
}

void Backoff::pause() {
  if (yields_ < 50) {
    ++yields_;
    sched_yield();
    return;
  }
  const timespec pause{0, sleep_ns_};
  nanosleep(&pause, nullptr);
  sleep_ns_ = std::min(sleep_ns_ * 2, 1'000'000L);
}

std::unique_ptr<Segment> Segment::create(const std::string& name, std::string_view job, int size, Deadline deadline) {
  const std::uint64_t chunk = default_chunk_bytes(size);
  const std::size_t bytes = segment_bytes(size, chunk);
  const std::string what = fmt::format("local job '{}'", job);
  bool incomplete_seen = false;
  auto incomplete_since = Clock::now();
  for (;;) {
    if (auto created = SharedSegment::try_create(name, bytes, what)) {
      std::unique_ptr<Segment> segment(new Segment(std::move(*created)));
      Header* header = new (segment->base()) Header();
      header->size = static_cast<std::uint64_t>(size);
      header->chunk_bytes = chunk;
      header->total_bytes = bytes;
      header->creator_pid.store(static_cast<std::uint64_t>(::getpid()));
      segment->header_ = header;
      segment->size_ = size;
      segment->stride_ = stride_of(chunk);
      segment->slots_ = reinterpret_cast<RankSlot*>(static_cast<std::byte*>(segment->base()) + kSlotsOffset);
      for (int r = 0; r < size; ++r) new (&segment->slots_[r]) RankSlot();
      segment->buffers_ = static_cast<std::byte*>(segment->base()) + buffers_offset(size);
      header->magic.store(kMagic, std::memory_order_release);
      return segment;
    }
    const Holder holder = inspect(name);
    if (holder.state == Holder::live) {
      fail("local job '{}': /dev/shm{} belongs to a running process (pid {}): another job uses the same job id; give "
           "each job its own {}",
           job, name, holder.pid, kLocalJobVariable);
    }
    if (holder.state == Holder::dead) {
      SharedSegment::remove(name);
      spdlog::warn("local job '{}': removed /dev/shm{}, left by an earlier job whose rank 0 (pid {}) has exited", job,
                   name, holder.pid);
      continue;
    }
    if (holder.state == Holder::incomplete) {
      // A creator between shm_open and its first stores takes microseconds; one that stays
      // incomplete for a second died there.
      const auto now = Clock::now();
      if (!incomplete_seen) {
        incomplete_seen = true;
        incomplete_since = now;
      } else if (now - incomplete_since > std::chrono::seconds(1)) {
        SharedSegment::remove(name);
        spdlog::warn("local job '{}': removed /dev/shm{}, left incomplete by a process that died creating it", job, name);
        incomplete_seen = false;
        continue;
      }
      if (now > deadline.at) {
        fail("local job '{}': rank 0 waited {:g} s for the incomplete /dev/shm{} to be completed or removed", job,
             deadline.timeout_s, name);
      }
      pause_briefly();
    }
  }
}

std::unique_ptr<Segment> Segment::open(const std::string& name, std::string_view job, int rank, int size,
                                       Deadline deadline) {
  std::string why = "it does not exist yet";
  for (;; pause_briefly()) {
    if (Clock::now() > deadline.at) {
      fail("local job '{}': rank {} waited {:g} s for rank 0 to create /dev/shm{} ({}); is rank 0 running?", job, rank,
           deadline.timeout_s, name, why);
    }
    auto opened = SharedSegment::try_open(name, fmt::format("local job '{}'", job));
    if (!opened) {
      why = "it does not exist yet";
      continue;
    }
    why = "it is not complete yet";
    if (opened->bytes() < sizeof(Header)) continue;
    std::unique_ptr<Segment> segment(new Segment(std::move(*opened)));
    const Header& header = *std::launder(static_cast<Header*>(segment->base()));
    if (header.magic.load(std::memory_order_acquire) != kMagic) continue;
    if (const std::uint64_t creator = header.creator_pid.load(); process_exited(creator)) {
      // An earlier job's; rank 0 replaces it.
      why = fmt::format("the one there was left by an earlier job whose rank 0 (pid {}) has exited", creator);
      continue;
    }
    if (header.version != kVersion) {
      fail("local job '{}': /dev/shm{} has layout version {}, this build {}: every rank must run the same build", job,
           name, header.version, kVersion);
    }
    if (header.size != static_cast<std::uint64_t>(size)) {
      fail("local job '{}': rank {} was started for {} ranks, but rank 0 created the group for {}", job, rank, size,
           header.size);
    }
    if (header.total_bytes != static_cast<std::uint64_t>(segment->memory_.bytes()) ||
        header.total_bytes != segment_bytes(size, header.chunk_bytes)) {
      fail("local job '{}': /dev/shm{} holds {} bytes, its header says {} (expected {})", job, name,
           segment->memory_.bytes(),
           header.total_bytes, segment_bytes(size, header.chunk_bytes));
    }
    segment->header_ = std::launder(static_cast<Header*>(segment->base()));
    segment->size_ = size;
    segment->stride_ = stride_of(header.chunk_bytes);
    segment->slots_ = std::launder(reinterpret_cast<RankSlot*>(static_cast<std::byte*>(segment->base()) + kSlotsOffset));
    segment->buffers_ = static_cast<std::byte*>(segment->base()) + buffers_offset(size);
    return segment;
  }
}

ChunkHeader& Segment::chunk_header(std::uint64_t round, int rank) const {
  const std::size_t index = static_cast<std::size_t>(round % 2) * static_cast<std::size_t>(size_) + static_cast<std::size_t>(rank);
  return *reinterpret_cast<ChunkHeader*>(buffers_ + index * stride_);
}

std::byte* Segment::chunk_data(std::uint64_t round, int rank) const {
  return reinterpret_cast<std::byte*>(&chunk_header(round, rank)) + kChunkDataOffset;
}

void Segment::unlink() { memory_.unlink(); }

}  // namespace odc::distributed::shm
