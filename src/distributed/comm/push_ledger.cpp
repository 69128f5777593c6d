#include "odc/distributed/comm/push_ledger.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "odc/core/error.h"

namespace odc::distributed {

PushLedger::PushLedger(HostGroup& group)
    : group_(group),
      rank_(group.rank()),
      world_(group.size()),
      sent_(static_cast<std::size_t>(group.size()), 0),
      applied_(static_cast<std::size_t>(group.size()), 0) {}

void PushLedger::begin() {
  std::fill(sent_.begin(), sent_.end(), 0);
  const std::lock_guard lock(mutex_);
  std::fill(applied_.begin(), applied_.end(), 0);
}

void PushLedger::applied(int client, std::int64_t messages) {
  {
    const std::lock_guard lock(mutex_);
    applied_[static_cast<std::size_t>(client)] += messages;
  }
  changed_.notify_all();
}

std::int64_t PushLedger::applied_from(int client) const {
  const std::lock_guard lock(mutex_);
  return applied_[static_cast<std::size_t>(client)];
}

std::vector<std::int64_t> PushLedger::exchange(std::string_view what) {
  // Row c of the matrix: what client c sent each owner. Counts stay far below 2^53: exact in doubles.
  const auto w = static_cast<std::size_t>(world_);
  std::vector<double> counts(w * w, 0.0);
  for (std::size_t o = 0; o < w; ++o) counts[static_cast<std::size_t>(rank_) * w + o] = static_cast<double>(sent_[o]);
  group_.all_reduce_sum(counts, what);
  std::vector<std::int64_t> expected(w);
  for (std::size_t c = 0; c < w; ++c) expected[c] = static_cast<std::int64_t>(counts[c * w + static_cast<std::size_t>(rank_)]);
  return expected;
}

void PushLedger::wait(const std::vector<std::int64_t>& expected, double timeout_s, const Peers& peers,
                      std::string_view what) {
  using Clock = std::chrono::steady_clock;
  const auto began = Clock::now();
  auto last_check = began;
  const auto name = [&](int r) { return peers.describe ? peers.describe(r) : fmt::format("rank {}", r); };
  std::unique_lock lock(mutex_);
  for (;;) {
    std::vector<int> short_of;
    for (int c = 0; c < world_; ++c) {
      if (applied_[static_cast<std::size_t>(c)] < expected[static_cast<std::size_t>(c)]) short_of.push_back(c);
    }
    if (short_of.empty()) break;
    // Failures of the transport are not signalled here: look every 100 ms.
    changed_.wait_for(lock, std::chrono::milliseconds(100));
    if (peers.check_failure) {
      lock.unlock();
      peers.check_failure();
      lock.lock();
    }
    const auto now = Clock::now();
    const double waited = std::chrono::duration<double>(now - began).count();
    const bool timed_out = waited > timeout_s;
    if (!timed_out && (now - last_check < std::chrono::seconds(1) || !peers.gone)) continue;
    last_check = now;
    std::vector<std::string> missing;
    for (const int c : short_of) {
      const auto i = static_cast<std::size_t>(c);
      if (applied_[i] >= expected[i]) continue;
      if (timed_out || (peers.gone && peers.gone(c))) {
        missing.push_back(fmt::format("{} ({} of {})", name(c), applied_[i], expected[i]));
      }
    }
    if (!missing.empty()) {
      fail("rank {}: {} stalled after {:.1f} s (comm.timeout_s = {} s): gradient pushes still missing from {}", rank_,
           what, waited, timeout_s, fmt::join(missing, ", "));
    }
  }
}

}  // namespace odc::distributed
