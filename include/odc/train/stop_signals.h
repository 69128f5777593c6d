#pragma once
// Graceful preemption: while a StopSignals object lives, SIGTERM and SIGINT only *request* a stop
// (the trainer finishes the current minibatch, agrees with every rank, checkpoints and exits 0);
// a second signal ends the process at once with the default action. The previous handlers come
// back when the object is destroyed.
#include <csignal>

namespace odc::train {

class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  // True once a signal arrived (on this process).
  bool requested() const;
  // The signal that arrived (0 = none).
  int signal_number() const;

 private:
  struct sigaction previous_term_ {};
  struct sigaction previous_int_ {};
};

}  // namespace odc::train
