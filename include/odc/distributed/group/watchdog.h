#pragma once
// Watchdog: a rank that waits in communication for longer than comm.timeout_s finds out which
// peers it waits for, says so, and ends the job — never a silent hang.
//
// Every rank runs one small thread on a duplicated communicator (its messages never mix with
// training traffic). It
//  * answers peers' "where are you?" queries with what this rank's compute thread is doing: the
//    wait it is in, or the activity it last announced, and for how long;
//  * watches the compute thread's current wait. Past the timeout it queries every peer and gives
//    them a few seconds to answer. A peer that does not answer is dead, frozen or unreachable: the
//    report names it and the job ends (MPI_Abort, non-zero exit). When every peer answers and all
//    of them wait too, nobody can make progress (a deadlock): the job ends as well. When some peer
//    answers that it is busy (a long checkpoint write, a huge microbatch) the wait is legitimate:
//    the report is a warning naming that peer and the wait is watched for another timeout.
//
// MPI waits of the trainer and the Comm implementations run inside a Watchdog::Wait scope; the
// one-sided transport has its own per-operation timeouts (UcxTransport).
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <mpi.h>

namespace odc::distributed {

// What a peer answered (or not) when queried.
struct PeerState {
  int rank = -1;
  bool answered = false;
  bool waiting = false;   // blocked in a watched wait (as opposed to busy computing)
  std::string where;      // the wait's or the activity's description
  double seconds = 0.0;   // how long it has been there
};

struct WatchdogReport {
  int rank = -1;
  std::string what;      // the wait that outlived the timeout
  std::string activity;  // what this rank was doing when it started waiting
  double waited_s = 0.0;
  double timeout_s = 0.0;
  std::vector<PeerState> peers;
  bool fatal = true;     // false: some peer is busy, the wait goes on
  std::string message() const;
};

class Watchdog {
 public:
  using Handler = std::function<void(const WatchdogReport&)>;
  // Collective over `comm` (duplicates it). timeout_s <= 0 or a single rank: nothing is watched.
  // The default handler logs the report and, when it is fatal, ends the job with MPI_Abort.
  Watchdog(MPI_Comm comm, double timeout_s, Handler handler = {});
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // The compute thread waits inside this scope (null watchdog: nothing happens).
  class Wait {
   public:
    Wait(Watchdog* watchdog, std::string what);
    ~Wait();
    Wait(const Wait&) = delete;
    Wait& operator=(const Wait&) = delete;

   private:
    Watchdog* watchdog_;
  };

  // What the compute thread does now (answers to peers' queries): "step 12: microbatch 3/7".
  void set_activity(std::string activity);
  int rank() const { return rank_; }
  double timeout_s() const { return timeout_s_; }
  // Seconds given to peers to answer a query (derived from the timeout, 0.2..10 s).
  double answer_wait_s() const;

 private:
  using Clock = std::chrono::steady_clock;
  void enter(std::string what);
  void leave();
  void loop();
  void serve_queries();
  std::string describe_self();
  void diagnose(const std::string& what, const std::string& activity, double waited);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int world_size_ = 1;
  double timeout_s_ = 0.0;
  Handler handler_;

  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  bool in_wait_ = false;
  std::string wait_what_;
  Clock::time_point wait_since_{};
  Clock::time_point next_check_{};
  std::string activity_;
  Clock::time_point activity_since_{};

  // Watchdog thread only.
  MPI_Request query_request_ = MPI_REQUEST_NULL;
  char query_buffer_ = 0;
  struct Answer {
    std::string text;
    MPI_Request request = MPI_REQUEST_NULL;
  };
  std::vector<std::unique_ptr<Answer>> answers_;
  std::thread thread_;
};

}  // namespace odc::distributed
