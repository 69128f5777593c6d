#include "odc/distributed/group/startup_deadline.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>
#include <mpi.h>
#include <spdlog/spdlog.h>

#include "odc/distributed/group/local_launch.h"

namespace odc::distributed {

StartupDeadline::StartupDeadline(double timeout_s, std::string tool, std::string phase, Expired on_expired)
    : timeout_s_(timeout_s),
      tool_(std::move(tool)),
      on_expired_(std::move(on_expired)),
      phase_(std::move(phase)),
      since_(Clock::now()) {
  if (timeout_s_ > 0) thread_ = std::thread([this] { loop(); });
}

StartupDeadline::~StartupDeadline() { disarm(); }

void StartupDeadline::phase(std::string what) {
  {
    const std::lock_guard lock(mutex_);
    phase_ = std::move(what);
    since_ = Clock::now();
  }
  wake_.notify_all();
}

void StartupDeadline::disarm() {
  if (!thread_.joinable()) return;
  {
    const std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void StartupDeadline::loop() {
  const auto timeout = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
  std::unique_lock lock(mutex_);
  while (!stop_) {
    // since_ moves with every phase(): wait for the deadline of the phase current on waking.
    if (wake_.wait_until(lock, since_ + timeout, [&] { return stop_; })) return;
    if (Clock::now() < since_ + timeout) continue;
    const std::string phase = phase_;
    const double waited = std::chrono::duration<double>(Clock::now() - since_).count();
    lock.unlock();
    if (on_expired_) {
      on_expired_(phase, waited);
    } else {
      expire_default(phase, waited);
    }
    return;  // a handler that returns (a test's) ends the watch: it fires once
  }
}

void StartupDeadline::expire_default(const std::string& phase, double waited_s) const {
  // Straight to stderr: the logger may not be set up yet, and this thread ends the process.
  std::fprintf(stderr, "%s: error: %s\n", tool_.c_str(), message(launcher_rank(), phase, waited_s, timeout_s_).c_str());
  std::fflush(stderr);
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  // MPI_Abort only once MPI is up (during MPI_Init it may block like the initialisation itself);
  // otherwise a non-zero exit makes mpirun end the job's other processes.
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}

std::string StartupDeadline::message(const std::string& rank, const std::string& phase, double waited_s,
                                     double timeout_s) {
  return fmt::format("rank {} is stuck in start-up: {:.1f} s in {} (start-up timeout {:g} s: comm.timeout_s, at "
                     "least {:g} s); a peer rank is frozen, dead or unreachable; ending the job",
                     rank, waited_s, phase, timeout_s, kMinStartupTimeoutS);
}

std::string StartupDeadline::launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", kLocalRankVariable}) {
    if (const char* value = std::getenv(name); value != nullptr && *value != '\0') return value;
  }
  return "?";
}

double startup_timeout(double comm_timeout_s) { return std::max(comm_timeout_s, kMinStartupTimeoutS); }

}  // namespace odc::distributed
