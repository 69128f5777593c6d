#include "odc/train/run/stop_signals.h"

#include <pthread.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "odc/core/process_stats.h"

namespace odc::train {

StopSignals::StopSignals() {
  sigemptyset(&set_);
  sigaddset(&set_, SIGINT);
  sigaddset(&set_, SIGTERM);
  sigaddset(&set_, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
  receiver_ = std::thread([this] { receive(); });
  if (const char* pid = std::getenv("ODC_LAUNCHER_PID"); pid != nullptr && std::atoi(pid) > 0) {
    launcher_ = std::atoi(pid);
    launcher_start_ = process_start(launcher_);
    watcher_ = std::thread([this] { watch_launcher(); });
  }
}

// Field 22 of /proc/PID/stat (start time since boot), "" when the process is gone or a zombie:
// the pid alone could be reused by an unrelated process after odc-run died.
std::string StopSignals::process_start(int pid, bool* asks_stop) {
  const auto stat = read_process_stat(pid);
  if (!stat) return "";
  if (asks_stop != nullptr) *asks_stop = stat->name == "odc-run:stop";
  return stat->exited() ? "" : stat->start_time;
}

// odc-run passes its pid (ODC_LAUNCHER_PID) to the ranks, also those mpirun starts, which are not
// its children: when odc-run dies, even of SIGKILL, the ranks stop as if it had asked them to
// (finish the minibatch, checkpoint, exit 0: the work is kept), and end themselves hard after
// kLauncherGoneGrace should that stop not finish (a peer that is gone, a hung exchange).
void StopSignals::watch_launcher() {
  using namespace std::chrono_literals;
  constexpr auto kLauncherGoneGrace = 60s;
  while (!closing_) {
    std::this_thread::sleep_for(100ms);
    if (closing_) return;
    bool asks = false;
    const auto start = process_start(launcher_, &asks);
    if (asks && !start.empty() && start == launcher_start_) {
      // odc-run's stop request by its name (it cannot always signal the ranks safely: see odc-run).
      int none = 0;
      first_.compare_exchange_strong(none, SIGUSR1);
      continue;
    }
    if (!start.empty() && start == launcher_start_) continue;
    std::fprintf(stderr, "odc: the launcher odc-run (pid %d) is gone: stopping (finish the minibatch, checkpoint, exit)\n",
                 launcher_);
    std::fflush(stderr);
    int none = 0;
    first_.compare_exchange_strong(none, kLauncherGone);
    const auto deadline = std::chrono::steady_clock::now() + kLauncherGoneGrace;
    while (!closing_ && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(100ms);
    if (closing_) return;
    std::fprintf(stderr, "odc: still running %d s after the launcher odc-run (pid %d) died: exiting now (status 1)\n",
                 static_cast<int>(kLauncherGoneGrace.count()), launcher_);
    std::fflush(stderr);
    _exit(1);
  }
}

StopSignals::~StopSignals() {
  closing_ = true;
  pthread_kill(receiver_.native_handle(), SIGUSR1);  // wakes sigwait; `closing_` says why
  receiver_.join();
  if (watcher_.joinable()) watcher_.join();
  // The signals stay blocked: a request still arriving while the process winds down (a storm of
  // them, or the scheduler's own SIGTERM after odc-run's) must not turn a clean exit into a death
  // by signal. Blocked signals pending at exit are discarded.
}

void StopSignals::receive() {
  bool terminating_seen = false;  // a SIGINT or SIGTERM arrived before
  for (;;) {
    int signal_number = 0;
    if (sigwait(&set_, &signal_number) != 0) continue;
    if (closing_) return;
    if (signal_number != SIGUSR1 && terminating_seen) {
      // Second SIGINT/SIGTERM: end the process with the default action, as if nothing had caught
      // the first. Unblocked in this thread only, the re-raised signal is delivered here.
      std::signal(signal_number, SIG_DFL);
      sigset_t one;
      sigemptyset(&one);
      sigaddset(&one, signal_number);
      pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
      raise(signal_number);
      return;
    }
    if (signal_number != SIGUSR1) terminating_seen = true;
    int none = 0;
    first_.compare_exchange_strong(none, signal_number);
  }
}

bool StopSignals::requested() const { return first_.load() != 0; }

int StopSignals::signal_number() const { return first_.load(); }

std::string StopSignals::describe() const {
  const int number = signal_number();
  if (number == 0) return "no signal";
  if (number == SIGUSR1) return "SIGUSR1, odc-run's stop request";
  if (number == kLauncherGone) return "the launcher odc-run died";
  const char* abbrev = sigabbrev_np(number);
  return abbrev != nullptr ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", number);
}

}  // namespace odc::train
