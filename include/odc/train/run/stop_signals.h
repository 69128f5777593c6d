#pragma once
// Graceful preemption. While a StopSignals object lives, SIGINT, SIGTERM and SIGUSR1 only
// *request* a stop (the trainer finishes the current minibatch, agrees with every rank,
// checkpoints and exits 0). A second SIGINT/SIGTERM ends the process at once with the default
// action; SIGUSR1 (what odc-run forwards through mpirun) never does, so a scheduler's SIGTERM
// arriving next to it is still one request.
//
// No signal handler runs: the constructor blocks the three signals in the calling thread, so
// every thread started afterwards (MPI's, UCX's, the comm's progress thread, OpenMP's) inherits
// the blocked mask, and one thread of its own receives them with sigwait. No system call anywhere
// in the process is interrupted by them (EINTR), whichever library it belongs to. Construct it
// first in main, before MPI or any other thread starts. The signals stay blocked after it.
//
// Under odc-run (ODC_LAUNCHER_PID set), a second thread watches the launcher: when it dies, even
// of SIGKILL, that is a stop request too, and the process exits (status 1) 60 s later if the
// graceful stop has not ended it.
#include <atomic>
#include <csignal>
#include <string>
#include <thread>

namespace odc::train {

class StopSignals {
 public:
  // signal_number() when the request came from the launcher's death (not a signal number).
  static constexpr int kLauncherGone = 1000;
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  // True once a signal arrived (on this process).
  bool requested() const;
  // The signal that asked first (0 = none).
  int signal_number() const;
  // The signal for a log line: "SIGTERM", "SIGUSR1, odc-run's stop request", ...
  std::string describe() const;

 private:
  void receive();
  void watch_launcher();
  static std::string process_start(int pid, bool* asks_stop = nullptr);

  sigset_t set_{};
  std::atomic<int> first_{0};
  std::atomic<bool> closing_{false};
  std::thread receiver_;
  int launcher_ = 0;             // ODC_LAUNCHER_PID (0: not started by odc-run)
  std::string launcher_start_;  // its start time, against pid reuse
  std::thread watcher_;
};

}  // namespace odc::train
