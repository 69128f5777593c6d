#include "odc/train/stop_signals.h"

#include <pthread.h>

#include <cstring>

#include <fmt/format.h>

namespace odc::train {

StopSignals::StopSignals() {
  sigemptyset(&set_);
  sigaddset(&set_, SIGINT);
  sigaddset(&set_, SIGTERM);
  sigaddset(&set_, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
  receiver_ = std::thread([this] { receive(); });
}

StopSignals::~StopSignals() {
  closing_ = true;
  pthread_kill(receiver_.native_handle(), SIGUSR1);  // wakes sigwait; `closing_` says why
  receiver_.join();
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
  const char* abbrev = sigabbrev_np(number);
  return abbrev != nullptr ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", number);
}

}  // namespace odc::train
