// UcxTransport's waits on the compute thread: for a group of operations, bounded by comm.timeout_s
// and naming the peers it still waits for; its failure check; and the progress thread's CPU time
// (ucx_transport.cpp holds the rest of the transport).
#include <pthread.h>

#include <chrono>
#include <ctime>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "odc/core/error.h"
#include "odc/distributed/transport/ucx/ucx_transport.h"

namespace odc::distributed {

UcxTransport::WaitScope::WaitScope(UcxTransport& t) : t_(t) { t_.compute_waits(true); }

UcxTransport::WaitScope::~WaitScope() { t_.compute_waits(false); }

void UcxTransport::compute_waits(bool waiting) {
  if (busy_poll_us_ == 0) return;
  if (waiting) {
    if (waiters_.fetch_add(1, std::memory_order_relaxed) == 0) wake();
  } else {
    waiters_.fetch_sub(1, std::memory_order_relaxed);
  }
}

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

void UcxTransport::check_failure(std::string_view what) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!fatal_.empty()) fail("rank {}: transport failure during {}: {}", rank_, what, fatal_);
}

double UcxTransport::progress_cpu_seconds() const {
  clockid_t clock = 0;
  if (pthread_getcpuclockid(const_cast<std::thread&>(progress_).native_handle(), &clock) != 0) return 0.0;
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace odc::distributed
