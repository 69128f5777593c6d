// StartupDeadline: the watch over MPI initialisation and the bootstrap exchanges, before any
// Watchdog exists. A handler that records instead of ending the process shows what fires, when
// and with which phase; the process-level behaviour (a rank frozen before MPI_Init) is
// tests/cli/test_startup_watchdog.sh.
#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "odc/distributed/group/startup_deadline.h"

using odc::distributed::StartupDeadline;

namespace {

struct Recorder {
  std::mutex mutex;
  std::condition_variable fired_cv;
  int fired = 0;
  std::string phase;
  double waited = 0.0;

  StartupDeadline::Expired handler() {
    return [this](const std::string& p, double w) {
      const std::lock_guard lock(mutex);
      ++fired;
      phase = p;
      waited = w;
      fired_cv.notify_all();
    };
  }
  // Waits (generously: a loaded machine) for the handler; true when it ran.
  bool wait_fired(std::chrono::seconds limit = std::chrono::seconds(30)) {
    std::unique_lock lock(mutex);
    return fired_cv.wait_for(lock, limit, [&] { return fired > 0; });
  }
};

}  // namespace

TEST_CASE("startup deadline: a phase that outlives the timeout fires once, naming the phase", "[startup_deadline]") {
  Recorder recorder;
  StartupDeadline deadline(0.2, "odc-test", "MPI initialisation", recorder.handler());
  REQUIRE(deadline.armed());
  REQUIRE(recorder.wait_fired());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // would be a second firing
  const std::lock_guard lock(recorder.mutex);
  CHECK(recorder.fired == 1);
  CHECK(recorder.phase == "MPI initialisation");
  CHECK(recorder.waited >= 0.2);
}

TEST_CASE("startup deadline: a new phase gets a full timeout of its own", "[startup_deadline]") {
  Recorder recorder;
  const auto start = std::chrono::steady_clock::now();
  StartupDeadline deadline(0.4, "odc-test", "first", recorder.handler());
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  deadline.phase("bootstrap exchange");
  REQUIRE(recorder.wait_fired());
  const double since_start = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::lock_guard lock(recorder.mutex);
  CHECK(recorder.phase == "bootstrap exchange");
  CHECK(recorder.waited >= 0.4);  // measured from the phase's start
  CHECK(since_start >= 0.65);     // 0.25 s of the first phase + the second's full 0.4 s
}

TEST_CASE("startup deadline: disarmed or not armed, it never fires", "[startup_deadline]") {
  Recorder recorder;
  {
    StartupDeadline deadline(0.3, "odc-test", "MPI initialisation", recorder.handler());
    deadline.disarm();
    CHECK_FALSE(deadline.armed());
    deadline.disarm();  // idempotent
  }
  StartupDeadline single(0.0, "odc-test", "one process waits on nobody", recorder.handler());
  CHECK_FALSE(single.armed());
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const std::lock_guard lock(recorder.mutex);
  CHECK(recorder.fired == 0);
}

TEST_CASE("startup deadline: the message and the floor of the timeout", "[startup_deadline]") {
  const std::string text = StartupDeadline::message("0", "MPI initialisation", 10.04, 10.0);
  CHECK(text.find("rank 0 is stuck in start-up: 10.0 s in MPI initialisation") == 0);
  CHECK(text.find("comm.timeout_s") != std::string::npos);
  CHECK(odc::distributed::startup_timeout(2.0) == odc::distributed::kMinStartupTimeoutS);
  CHECK(odc::distributed::startup_timeout(600.0) == 600.0);
}
