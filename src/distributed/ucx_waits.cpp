// UcxTransport's waits on the compute thread: for a group of operations, and at the minibatch end
// for every client's pushes, each bounded by comm.timeout_s and naming the peers it still waits
// for; and the progress thread's CPU time (ucx_transport.cpp holds the rest of the transport).
#include <pthread.h>

#include <chrono>
#include <ctime>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "odc/core/error.h"
#include "odc/distributed/ucx_transport.h"

namespace odc::distributed {

// Marks the calling compute thread as blocked on the transport for its lifetime.
class UcxTransport::WaitScope {
 public:
  explicit WaitScope(UcxTransport& t) : t_(t) {
    if (t_.busy_poll_us_ > 0 && t_.waiters_.fetch_add(1, std::memory_order_relaxed) == 0) t_.wake();
  }
  ~WaitScope() {
    if (t_.busy_poll_us_ > 0) t_.waiters_.fetch_sub(1, std::memory_order_relaxed);
  }
  WaitScope(const WaitScope&) = delete;
  WaitScope& operator=(const WaitScope&) = delete;

 private:
  UcxTransport& t_;
};

void UcxTransport::wait(Completion& completion, const std::string& what) {
  if (completion.done()) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!fatal_.empty()) fail("rank {}: transport failure during {}: {}", rank_, what, fatal_);
    if (!completion.error_.empty()) fail("rank {}: {} failed: {}", rank_, what, completion.error_);
    return;
  }
  const WaitScope waiting(*this);
  std::unique_lock<std::mutex> lock(mutex_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(options_.timeout_s);
  while (!completion.done() && fatal_.empty()) {
    if (done_cv_.wait_until(lock, deadline) == std::cv_status::timeout && !completion.done()) {
      std::vector<int> peers;
      for (int r = 0; r < completion.world_size_; ++r) {
        if (completion.per_peer_[static_cast<std::size_t>(r)].load() > 0) peers.push_back(r);
      }
      fail("rank {}: {} stalled: no completion from rank(s) {} after comm.timeout_s = {} s (is that rank "
           "alive and making progress?)", rank_, what, fmt::join(peers, ", "), options_.timeout_s);
    }
  }
  if (!fatal_.empty()) fail("rank {}: transport failure during {}: {}", rank_, what, fatal_);
  if (!completion.error_.empty()) fail("rank {}: {} failed: {}", rank_, what, completion.error_);
}

std::int64_t UcxTransport::received_from(int client) const {
  return received_[static_cast<std::size_t>(client)].load(std::memory_order_acquire);
}

void UcxTransport::wait_received(const std::vector<std::int64_t>& expected, const std::string& what) {
  const WaitScope waiting(*this);
  std::unique_lock<std::mutex> lock(mutex_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(options_.timeout_s);
  auto complete = [&] {
    for (int r = 0; r < world_size_; ++r) {
      if (received_from(r) < expected[static_cast<std::size_t>(r)]) return false;
    }
    return true;
  };
  while (!complete() && fatal_.empty()) {
    if (done_cv_.wait_until(lock, deadline) == std::cv_status::timeout && !complete()) {
      std::vector<std::string> missing;
      for (int r = 0; r < world_size_; ++r) {
        const auto got = received_from(r);
        if (got < expected[static_cast<std::size_t>(r)]) {
          missing.push_back(fmt::format("rank {} ({} of {})", r, got, expected[static_cast<std::size_t>(r)]));
        }
      }
      fail("rank {}: {} stalled after comm.timeout_s = {} s: gradient pushes still missing from {}", rank_, what,
           options_.timeout_s, fmt::join(missing, ", "));
    }
  }
  if (!fatal_.empty()) fail("rank {}: transport failure during {}: {}", rank_, what, fatal_);
}

void UcxTransport::reset_received() {
  for (int r = 0; r < world_size_; ++r) received_[static_cast<std::size_t>(r)].store(0);
}

double UcxTransport::progress_cpu_seconds() const {
  clockid_t clock = 0;
  if (pthread_getcpuclockid(const_cast<std::thread&>(progress_).native_handle(), &clock) != 0) return 0.0;
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace odc::distributed
