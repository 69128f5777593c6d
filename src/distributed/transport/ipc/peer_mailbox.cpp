#include "odc/distributed/transport/ipc/peer_mailbox.h"

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "odc/core/error.h"

namespace odc::distributed {

namespace {
constexpr std::uint32_t kFree = 0;
constexpr std::uint32_t kPosted = 1;
constexpr std::uint64_t kMagic = 0x6f64632d6d626f78ULL;  // "odc-mbox"

struct BlockHeader {
  std::uint64_t magic;
  std::int64_t pid;
  std::int32_t world;
  std::int32_t slots;
  char pad[40];
};
static_assert(sizeof(BlockHeader) == 64);
}  // namespace

// One cache line per slot: the client writes the header and the state, the owner the state.
struct PeerMailbox::Slot {
  std::uint32_t state;
  std::int32_t unit;
  std::int32_t sequence;
  std::int32_t pad0;
  std::int64_t offset;
  std::int64_t count;
  char pad[32];
};
static_assert(sizeof(PeerMailbox::Slot) == 64);
static_assert(std::atomic_ref<std::uint32_t>::is_always_lock_free);

PeerMailbox::PeerMailbox(HostGroup& group, const std::string& prefix, int slots)
    : rank_(group.rank()), world_(group.size()), slots_(slots) {
  ODC_CHECK(slots >= 1, "a mailbox needs at least one slot per client, got {}", slots);
  const std::size_t bytes = sizeof(BlockHeader) + sizeof(Slot) * static_cast<std::size_t>(world_) * slots_;
  auto name = [&](int r) { return fmt::format("{}-mailbox-r{}", prefix, r); };
  SharedSegment own = SharedSegment::create(name(rank_), bytes, "the IPC transport's mailbox");
  auto* header = static_cast<BlockHeader*>(own.data());
  header->magic = kMagic;
  header->pid = ::getpid();
  header->world = world_;
  header->slots = slots_;
  // Every rank's pid and block address: a rank of the same process (threads as ranks) uses the
  // creator's mapping, so that one memory has one address in a process (atomics synchronize per
  // address for the tools that check them).
  std::vector<std::pair<long long, unsigned long long>> where;
  for (const auto& text : group.all_gather_text(
           fmt::format("{} {:x}", ::getpid(), reinterpret_cast<std::uintptr_t>(own.data())), "the IPC mailboxes' creation")) {
    long long pid = 0;
    unsigned long long address = 0;
    std::sscanf(text.c_str(), "%lld %llx", &pid, &address);
    where.emplace_back(pid, address);
  }
  ODC_CHECK(static_cast<int>(where.size()) == world_, "mailbox exchange: {} entries for {} ranks", where.size(), world_);
  blocks_.resize(static_cast<std::size_t>(world_));
  views_.assign(static_cast<std::size_t>(world_), nullptr);
  for (int r = 0; r < world_; ++r) {
    const auto i = static_cast<std::size_t>(r);
    if (r == rank_) continue;
    if (where[i].first == ::getpid()) {
      views_[i] = reinterpret_cast<void*>(static_cast<std::uintptr_t>(where[i].second));
    } else {
      blocks_[i] = SharedSegment::open(name(r), bytes, "the IPC transport's mailbox");
      views_[i] = blocks_[i].data();
    }
    const auto* peer = static_cast<const BlockHeader*>(views_[i]);
    if (peer->magic != kMagic || peer->world != world_ || peer->slots != slots_) {
      fail("rank {}: the IPC mailbox of rank {} is for {} ranks with {} slots, this rank expects {} with {}", rank_, r,
           peer->world, peer->slots, world_, slots_);
    }
  }
  views_[static_cast<std::size_t>(rank_)] = own.data();
  blocks_[static_cast<std::size_t>(rank_)] = std::move(own);
  group.barrier("the IPC mailboxes' opening");
  blocks_[static_cast<std::size_t>(rank_)].unlink();
}

PeerMailbox::Slot* PeerMailbox::slot_at(int owner, int client, int slot) const {
  auto* base = static_cast<char*>(views_[static_cast<std::size_t>(owner)]) + sizeof(BlockHeader);
  return reinterpret_cast<Slot*>(base) + static_cast<std::size_t>(client) * slots_ + slot;
}

bool PeerMailbox::slot_free(int owner, int slot) {
  Slot* s = slot_at(owner, rank_, slot);
  return std::atomic_ref<std::uint32_t>(s->state).load(std::memory_order_acquire) == kFree;
}

void PeerMailbox::post(int owner, int slot, const PushHeader& header) {
  Slot* s = slot_at(owner, rank_, slot);
  s->unit = header.tag;
  s->sequence = header.sequence;
  s->offset = header.offset;
  s->count = header.count;
  std::atomic_ref<std::uint32_t>(s->state).store(kPosted, std::memory_order_release);
}

bool PeerMailbox::posted(int client, int slot, PushHeader& header) {
  Slot* s = slot_at(rank_, client, slot);
  if (std::atomic_ref<std::uint32_t>(s->state).load(std::memory_order_acquire) != kPosted) return false;
  header = PushHeader{s->unit, client, s->offset, s->count, slot, s->sequence};
  return true;
}

void PeerMailbox::release(int client, int slot) {
  std::atomic_ref<std::uint32_t>(slot_at(rank_, client, slot)->state).store(kFree, std::memory_order_release);
}

pid_t PeerMailbox::pid(int rank) const {
  return static_cast<pid_t>(static_cast<const BlockHeader*>(views_[static_cast<std::size_t>(rank)])->pid);
}

// The host's one liveness check (shared_segment.h): a zombie counts as exited, so a crashed rank
// whose launcher has not reaped it yet is named at once.
bool PeerMailbox::alive(int rank) const { return !process_exited(static_cast<std::uint64_t>(pid(rank))); }

std::string PeerMailbox::describe(int rank) const {
  return alive(rank) ? fmt::format("rank {} (pid {}) is alive but not progressing", rank, pid(rank))
                     : fmt::format("rank {} (pid {}) exited", rank, pid(rank));
}

}  // namespace odc::distributed
