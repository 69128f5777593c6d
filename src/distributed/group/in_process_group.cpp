#include "odc/distributed/group/in_process_group.h"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>

#include <fmt/format.h>

#include "exchange_parts.h"
#include "odc/core/error.h"

namespace odc::distributed {

struct InProcessGroup::Shared {
  int size = 1;
  double timeout_s = 30.0;
  std::mutex mutex;
  std::condition_variable changed;
  // The exchange being collected: its label (kind + what, from the first rank to arrive) and the
  // ranks' contributions. Once all arrived, `results` holds them until every rank has read them.
  std::string label;
  int arrived = 0;
  std::vector<std::string> contributions;
  std::vector<std::string> results;
  int leaving = 0;
  std::uint64_t round = 0;
  std::string error;  // set once: every later exchange throws it
  std::vector<std::string> activities;
};

std::vector<std::unique_ptr<InProcessGroup>> InProcessGroup::create(int size, double timeout_s) {
  if (size < 1) fail("an in-process group needs at least one rank, got {}", size);
  auto shared = std::make_shared<Shared>();
  shared->size = size;
  shared->timeout_s = timeout_s;
  shared->contributions.resize(static_cast<std::size_t>(size));
  shared->activities.resize(static_cast<std::size_t>(size));
  std::vector<std::unique_ptr<InProcessGroup>> members;
  for (int r = 0; r < size; ++r) members.push_back(std::unique_ptr<InProcessGroup>(new InProcessGroup(shared, r)));
  return members;
}

InProcessGroup::InProcessGroup(std::shared_ptr<Shared> shared, int rank) : shared_(std::move(shared)), rank_(rank) {}

int InProcessGroup::size() const { return shared_->size; }

std::vector<std::string> InProcessGroup::exchange(std::string_view kind, std::string_view what, std::string contribution) {
  Shared& s = *shared_;
  const std::string label = fmt::format("{} '{}'", kind, what);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(s.timeout_s);
  std::unique_lock lock(s.mutex);
  auto wait_until = [&](auto ready, const char* waiting_for) {
    if (!s.changed.wait_until(lock, deadline, [&] { return ready() || !s.error.empty(); })) {
      s.error = fmt::format("in-process group: rank {} waited {:g} s in {} for {}", rank_, s.timeout_s, label, waiting_for);
      s.changed.notify_all();
    }
    if (!s.error.empty()) fail("{}", s.error);
  };
  // The previous exchange's results must be read by every rank before this one collects.
  wait_until([&] { return s.leaving == 0; }, "the other ranks to finish the previous exchange");
  if (s.arrived == 0) {
    s.label = label;
  } else if (s.label != label) {
    s.error = fmt::format("in-process group: rank {} called {} while another rank called {}", rank_, label, s.label);
    s.changed.notify_all();
    fail("{}", s.error);
  }
  s.contributions[static_cast<std::size_t>(rank_)] = std::move(contribution);
  const std::uint64_t round = s.round;
  if (++s.arrived == s.size) {
    s.results.swap(s.contributions);
    s.contributions.assign(static_cast<std::size_t>(s.size), std::string());
    s.arrived = 0;
    s.leaving = s.size;
    ++s.round;
    s.changed.notify_all();
  } else {
    wait_until([&] { return s.round != round; }, "every rank to arrive");
  }
  std::vector<std::string> out = s.results;
  if (--s.leaving == 0) s.changed.notify_all();
  return out;
}

void InProcessGroup::barrier(std::string_view what) { exchange("barrier", what, {}); }

void InProcessGroup::all_reduce_sum(std::span<double> values, std::string_view what) {
  const auto all = exchange(fmt::format("all_reduce_sum of {} values", values.size()), what,
                            std::string(reinterpret_cast<const char*>(values.data()), values.size_bytes()));
  detail::sum_in_rank_order(all, values);  // the same bits on every rank
}

void InProcessGroup::gather_to(int root, std::span<const std::byte> mine, std::span<std::byte> all,
                               std::string_view what) {
  detail::check_root(root, size(), what);
  const auto parts = exchange(fmt::format("gather of {} bytes to rank {}", mine.size(), root), what,
                              std::string(reinterpret_cast<const char*>(mine.data()), mine.size()));
  if (rank() != root) return;
  detail::place_gathered(parts, mine.size(), all, what);
}

std::vector<std::string> InProcessGroup::gather_text(std::string_view mine, std::string_view what) {
  auto parts = exchange("gather_text", what, std::string(mine));
  if (!is_root()) return {};
  return parts;
}

void InProcessGroup::broadcast(std::string& text, std::string_view what) {
  text = exchange("broadcast", what, is_root() ? text : std::string()).front();
}

void InProcessGroup::announce(std::string activity) {
  const std::lock_guard lock(shared_->mutex);
  shared_->activities[static_cast<std::size_t>(rank_)] = std::move(activity);
}

std::string InProcessGroup::activity() const {
  const std::lock_guard lock(shared_->mutex);
  return shared_->activities[static_cast<std::size_t>(rank_)];
}

}  // namespace odc::distributed
