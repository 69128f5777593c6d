#include "odc/train/stop_signals.h"

#include <cstring>

namespace odc::train {

namespace {
// A signal handler can only talk to the program through a lock-free flag with static storage:
// this is the one piece of global state the trainer needs, and only StopSignals touches it.
volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int signal_number) {
  if (g_stop_signal != 0) {
    // Second signal: stop now, as the default action would have done the first time.
    std::signal(signal_number, SIG_DFL);
    std::raise(signal_number);
    return;
  }
  g_stop_signal = signal_number;
}
}  // namespace

StopSignals::StopSignals() {
  g_stop_signal = 0;
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // blocking calls resume; the flag is checked between steps
  sigaction(SIGTERM, &action, &previous_term_);
  sigaction(SIGINT, &action, &previous_int_);
}

StopSignals::~StopSignals() {
  sigaction(SIGTERM, &previous_term_, nullptr);
  sigaction(SIGINT, &previous_int_, nullptr);
}

bool StopSignals::requested() const { return g_stop_signal != 0; }

int StopSignals::signal_number() const { return static_cast<int>(g_stop_signal); }

}  // namespace odc::train
