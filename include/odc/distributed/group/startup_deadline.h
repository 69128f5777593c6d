#pragma once
// StartupDeadline: the watchdog of the moments before the Watchdog exists. MPI initialisation
// (every rank of the job must start and answer) and the world group's bootstrap exchanges wait on
// peers with no timeout of their own: a rank frozen or lost there would hang the others forever.
// While armed, a thread waits `timeout_s` per phase; a phase that outlives it ends the process
// through `on_expired` (default: a "TOOL: error: rank R is stuck in start-up ..." line on stderr,
// then MPI_Abort when MPI is up, else _Exit(1): mpirun then ends the other ranks).
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace odc::distributed {

class StartupDeadline {
 public:
  // Called on the deadline's thread with the phase and the seconds it lasted; the default does
  // not return.
  using Expired = std::function<void(const std::string& phase, double waited_s)>;

  // timeout_s <= 0: never armed (a single process waits on nobody).
  StartupDeadline(double timeout_s, std::string tool, std::string phase, Expired on_expired = {});
  ~StartupDeadline();  // disarms
  StartupDeadline(const StartupDeadline&) = delete;
  StartupDeadline& operator=(const StartupDeadline&) = delete;

  // A new phase: its name in the message, and a full timeout from now.
  void phase(std::string what);
  // Stops the thread; the process goes on whatever the time. Idempotent.
  void disarm();
  bool armed() const { return thread_.joinable(); }

  // The message the default handler prints (after "TOOL: error: ").
  static std::string message(const std::string& rank, const std::string& phase, double waited_s, double timeout_s);
  // This process's rank as the launcher gave it (OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK or
  // ODC_LOCAL_RANK), "?" when none: known before MPI initialisation.
  static std::string launcher_rank();

 private:
  using Clock = std::chrono::steady_clock;
  void loop();
  void expire_default(const std::string& phase, double waited_s) const;

  double timeout_s_;
  std::string tool_;
  Expired on_expired_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::string phase_;
  Clock::time_point since_;
  std::thread thread_;
};

// The start-up timeout for `comm.timeout_s` = `timeout_s`: never below kMinStartupTimeoutS, so that
// a slow but alive start (many ranks on few cores) is not ended by a short timeout meant for waits
// during training.
inline constexpr double kMinStartupTimeoutS = 10.0;
double startup_timeout(double comm_timeout_s);

}  // namespace odc::distributed
