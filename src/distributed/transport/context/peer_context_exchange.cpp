// PeerContextExchange (peer_context_exchange.h): set-up, and the exchange's seven steps.
#include "odc/distributed/transport/context/peer_context_exchange.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "odc/core/error.h"

namespace odc::distributed {

namespace {
constexpr std::uint64_t kMagic = 0x6f64632d63786368ULL;  // "odc-cxch"

struct BlockHeader {
  std::uint64_t magic;
  std::int64_t pid;
  std::int32_t world;
  char pad[44];
};
static_assert(sizeof(BlockHeader) == 64);

std::string host_name() {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  return host;
}

std::size_t block_bytes(int world) { return sizeof(BlockHeader) + 2 * 64 * static_cast<std::size_t>(world); }

// A bounded poll: spins briefly (a peer that is a step behind answers within microseconds), then
// yields, then sleeps up to 200 us (ranks may outnumber cores: a spinning waiter would steal the
// core its peer needs). Checks the peer's process about every 100 ms.
class Poll {
 public:
  explicit Poll(double timeout_s)
      : deadline_(std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                         std::chrono::duration<double>(timeout_s))) {}
  // false once the deadline passed.
  bool pause() {
    ++rounds_;
    if (rounds_ < 64) return true;
    if (rounds_ < 256) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(rounds_ < 1024 ? 20 : 200));
    }
    return (rounds_ & 63) != 0 || std::chrono::steady_clock::now() < deadline_;
  }
  // Whether it is time to look at the peers' processes (every ~100 ms of sleeping).
  bool check_liveness() const { return rounds_ >= 1024 && rounds_ % 500 == 0; }

 private:
  std::chrono::steady_clock::time_point deadline_;
  std::int64_t rounds_ = 0;
};
}  // namespace

// One cache line of a control block: ready (seq, tag, bytes) or done (seq, tag), written by the
// block's owner only; seq is stored last with release, read first with acquire.
struct PeerContextExchange::Line {
  std::uint64_t seq;
  std::uint64_t tag;
  std::int64_t bytes;
  char pad[40];
};
static_assert(sizeof(PeerContextExchange::Line) == 64);
static_assert(std::atomic_ref<std::uint64_t>::is_always_lock_free);

PeerContextExchange::PeerContextExchange(std::unique_ptr<PeerMemory> memory, HostGroup& group,
                                         const ContextExchangeOptions& options)
    : memory_(std::move(memory)), options_(options), rank_(group.rank()), world_(group.size()) {
  options_.validate();
  const auto w = static_cast<std::size_t>(world_);
  count_.assign(w, 0);
  std::string prefix = group.is_root() ? unique_segment_prefix() : std::string();
  group.broadcast(prefix, "the context exchange's control block names");
  auto block_name = [&](int r) { return fmt::format("{}-cx-r{}", prefix, r); };
  SharedSegment own = SharedSegment::create(block_name(rank_), block_bytes(world_), "the context exchange's signals");
  auto* header = static_cast<BlockHeader*>(own.data());
  header->magic = kMagic;
  header->pid = ::getpid();
  header->world = world_;

  std::string handle;
  region_ = memory_->export_region(static_cast<std::size_t>(options_.max_exposed_bytes),
                                   "the context exchange's exposed region", handle);
  const nlohmann::json mine = {{"host", host_name()},
                               {"pid", ::getpid()},
                               {"memory", std::string(memory_->name())},
                               {"region", handle},
                               {"block", fmt::format("{:x}", reinterpret_cast<std::uintptr_t>(own.data()))}};
  std::vector<nlohmann::json> peers;
  for (const auto& text : group.all_gather_text(mine.dump(), "the context exchange's handle exchange")) {
    peers.push_back(nlohmann::json::parse(text));
  }
  std::vector<std::string> elsewhere;
  for (int r = 0; r < world_; ++r) {
    const auto& p = peers[static_cast<std::size_t>(r)];
    if (p.at("host") != mine.at("host")) elsewhere.push_back(fmt::format("rank {} on {}", r, p.at("host").get<std::string>()));
    if (p.at("memory") != mine.at("memory")) {
      fail("the context exchange of rank {} runs over {}, rank {}'s over {}: every rank's rows must live alike", rank_,
           mine.at("memory").get<std::string>(), r, p.at("memory").get<std::string>());
    }
  }
  if (!elsewhere.empty()) {
    fail("the peer-memory context exchange needs every rank on one host; rank {} runs on {}, but {}", rank_,
         mine.at("host").get<std::string>(), fmt::join(elsewhere, ", "));
  }
  regions_.assign(w, nullptr);
  blocks_.resize(w);
  block_views_.assign(w, nullptr);
  for (int r = 0; r < world_; ++r) {
    const auto i = static_cast<std::size_t>(r);
    const auto& p = peers[i];
    if (r == rank_) {
      regions_[i] = static_cast<const char*>(region_);
      continue;
    }
    regions_[i] = static_cast<const char*>(
        memory_->open(p.at("region").get<std::string>(), fmt::format("rank {}'s context exchange region", r)));
    if (p.at("pid").get<long long>() == ::getpid()) {
      // A rank of this process (threads as ranks): one memory, one address (atomics synchronize
      // per address for the tools that check them).
      block_views_[i] = reinterpret_cast<void*>(static_cast<std::uintptr_t>(std::stoull(p.at("block").get<std::string>(), nullptr, 16)));
    } else {
      blocks_[i] = SharedSegment::open(block_name(r), block_bytes(world_), "the context exchange's signals");
      block_views_[i] = blocks_[i].data();
    }
    const auto* peer = static_cast<const BlockHeader*>(block_views_[i]);
    if (peer->magic != kMagic || peer->world != world_) {
      fail("rank {}: rank {}'s context exchange block is for {} ranks, this rank expects {}", rank_, r, peer->world, world_);
    }
  }
  block_views_[static_cast<std::size_t>(rank_)] = own.data();
  blocks_[static_cast<std::size_t>(rank_)] = std::move(own);
  group.barrier("the context exchange's regions mapped");
  blocks_[static_cast<std::size_t>(rank_)].unlink();
  memory_->all_opened();
  compute_mark_ = memory_->make_mark();
  gather_mark_ = memory_->make_mark();
}

PeerContextExchange::~PeerContextExchange() {
  // A copy still queued (an exchange that failed midway) must not outlive the regions.
  try {
    memory_->synchronize(Lane::gather);
  } catch (const std::exception&) {  // a failed device: nothing left to protect
  }
}

PlannedMemory PeerContextExchange::allocated() const {
  return planned_context_exchange(options_, kind(), world_, memory_->device().kind != DeviceKind::cpu);
}

PeerContextExchange::Line* PeerContextExchange::line(int owner, int peer, bool done) const {
  auto* base = static_cast<char*>(block_views_[static_cast<std::size_t>(owner)]) + sizeof(BlockHeader);
  return reinterpret_cast<Line*>(base) + 2 * static_cast<std::size_t>(peer) + (done ? 1 : 0);
}

bool PeerContextExchange::peer_gone(int peer) const {
  const auto* header = static_cast<const BlockHeader*>(block_views_[static_cast<std::size_t>(peer)]);
  return process_exited(static_cast<std::uint64_t>(header->pid));
}

std::string PeerContextExchange::describe_peer(int peer) const {
  const auto pid = static_cast<const BlockHeader*>(block_views_[static_cast<std::size_t>(peer)])->pid;
  return peer_gone(peer) ? fmt::format("rank {} (pid {}) exited", peer, pid)
                         : fmt::format("rank {} (pid {}) is alive but has not come", peer, pid);
}

namespace {
void publish(PeerContextExchange::Line* l, std::uint64_t seq, std::uint64_t tag, std::int64_t bytes) {
  l->tag = tag;
  l->bytes = bytes;
  std::atomic_ref<std::uint64_t>(l->seq).store(seq, std::memory_order_release);
}
std::uint64_t seq_of(PeerContextExchange::Line* l) {
  return std::atomic_ref<std::uint64_t>(l->seq).load(std::memory_order_acquire);
}
}  // namespace

void PeerContextExchange::exchange(const model::ContextSplit& split, std::span<const model::ExchangePiece> pieces,
                                   const void* mine, std::int64_t mine_bytes, void* into, std::int64_t into_bytes,
                                   std::string_view what) {
  detail::check_exchange(split, pieces, rank_, world_, mine_bytes, into_bytes, options_.max_exposed_bytes, what);
  const int k = split.k();
  const int me = split.member;
  const auto rank_of = [&](int member) { return split.ranks[static_cast<std::size_t>(member)]; };
  // Who reads whose region in this exchange (members, self excluded).
  std::vector<bool> reads_from(static_cast<std::size_t>(k), false);
  std::vector<bool> read_by(static_cast<std::size_t>(k), false);
  for (const auto& p : pieces) {
    if (p.bytes == 0 || p.from == p.to) continue;
    if (p.to == me) reads_from[static_cast<std::size_t>(p.from)] = true;
    if (p.from == me) read_by[static_cast<std::size_t>(p.to)] = true;
  }
  // 1. This exchange's number with every other member.
  std::vector<std::uint64_t> seq(static_cast<std::size_t>(k), 0);
  for (int m = 0; m < k; ++m) {
    if (m != me) seq[static_cast<std::size_t>(m)] = ++count_[static_cast<std::size_t>(rank_of(m))];
  }
  const auto fail_wait = [&](int m, std::string_view waited, std::uint64_t expected) {
    fail("{} (context group tag {:#x}, {}): rank {} waited {} s for rank {} {} (their exchange {}): {}", what,
         split.tag, detail::describe_group(split), rank_, options_.timeout_s, rank_of(m), waited, expected,
         describe_peer(rank_of(m)));
  };
  const auto check_line = [&](int m, const Line* l, std::uint64_t s, std::uint64_t expected, std::string_view kind) {
    if (s > expected || l->tag != split.tag) {
      fail("{} (context group tag {:#x}, {}): rank {}'s {} shows exchange {} of group tag {:#x} where rank {} is in "
           "exchange {} of this group: the two ranks run their context exchanges in different orders",
           what, split.tag, detail::describe_group(split), rank_of(m), kind, s, l->tag, rank_, expected);
    }
  };

  // 2. `mine` into our region, after the compute lane's work; complete before it is published.
  memory_->record(*compute_mark_, Lane::compute);
  memory_->wait_for(Lane::gather, *compute_mark_);
  memory_->copy(Lane::gather, region_, mine, static_cast<std::size_t>(mine_bytes));
  memory_->synchronize(Lane::gather);
  // 3. Publish to every other member.
  for (int m = 0; m < k; ++m) {
    if (m != me) publish(line(rank_, rank_of(m), false), seq[static_cast<std::size_t>(m)], split.tag, mine_bytes);
  }
  // 4. Our own pieces.
  for (const auto& p : pieces) {
    if (p.to == me && p.from == me) {
      memory_->copy(Lane::gather, static_cast<char*>(into) + p.dst, static_cast<const char*>(mine) + p.src,
                    static_cast<std::size_t>(p.bytes));
    }
  }
  // 5. The peers' pieces, each peer as soon as it has published.
  int pending = 0;
  for (int m = 0; m < k; ++m) pending += reads_from[static_cast<std::size_t>(m)] ? 1 : 0;
  Poll poll(options_.timeout_s);
  while (pending > 0) {
    bool progressed = false;
    for (int m = 0; m < k; ++m) {
      const auto i = static_cast<std::size_t>(m);
      if (!reads_from[i]) continue;
      Line* ready = line(rank_of(m), rank_, false);
      const std::uint64_t s = seq_of(ready);
      if (s < seq[i]) continue;
      check_line(m, ready, s, seq[i], "published region");
      const char* region = regions_[static_cast<std::size_t>(rank_of(m))];
      for (const auto& p : pieces) {
        if (p.from != m || p.to != me || p.bytes == 0) continue;
        if (p.src + p.bytes > ready->bytes) {
          fail("{} (context group tag {:#x}): a piece of {} bytes at byte {} of rank {}'s rows, which are {} bytes", what,
               split.tag, p.bytes, p.src, rank_of(m), ready->bytes);
        }
        memory_->copy(Lane::gather, static_cast<char*>(into) + p.dst, region + p.src, static_cast<std::size_t>(p.bytes));
      }
      // Its region is free for it once our copies completed.
      memory_->synchronize(Lane::gather);
      publish(line(rank_, rank_of(m), true), seq[i], split.tag, 0);
      reads_from[i] = false;
      --pending;
      progressed = true;
    }
    if (pending == 0 || progressed) continue;
    const bool in_time = poll.pause();
    for (int m = 0; m < k; ++m) {
      if (!reads_from[static_cast<std::size_t>(m)]) continue;
      if (!in_time || (poll.check_liveness() && peer_gone(rank_of(m)))) {
        fail_wait(m, "to publish its rows", seq[static_cast<std::size_t>(m)]);
      }
    }
  }
  // 6. Every reader of our region is done with it.
  Poll acks(options_.timeout_s);
  for (int m = 0; m < k; ++m) {
    const auto i = static_cast<std::size_t>(m);
    if (!read_by[i]) continue;
    Line* done = line(rank_of(m), rank_, true);
    while (true) {
      const std::uint64_t s = seq_of(done);
      if (s >= seq[i]) {
        check_line(m, done, s, seq[i], "acknowledgement");
        break;
      }
      if (!acks.pause() || (acks.check_liveness() && peer_gone(rank_of(m)))) {
        fail_wait(m, "to acknowledge reading this rank's rows", seq[i]);
      }
    }
  }
  // 7. `into` for the work issued after this call.
  memory_->record(*gather_mark_, Lane::gather);
  memory_->wait_for(Lane::compute, *gather_mark_);
}

}  // namespace odc::distributed
