// Watchdog under mpirun: a rank stuck in a wait past the timeout asks its peers where they are and
// reports them by rank — a busy peer keeps the job waiting (warning), a job where every rank waits
// is a deadlock (fatal), and a peer that does not answer is named as dead or frozen (fatal).
// The handler records reports instead of aborting the job.
#include <mpi.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "mpi_test_support.h"
#include "odc/distributed/group/watchdog.h"

using namespace odc;
using test::mpi_rank;
using test::mpi_world;

namespace {

constexpr double kTimeout = 0.5;  // s; every wait below is ≥ 2.4 timeouts long

struct Recorder {
  std::mutex mutex;
  std::vector<distributed::WatchdogReport> reports;
  distributed::Watchdog::Handler handler() {
    return [this](const distributed::WatchdogReport& r) {
      const std::lock_guard lock(mutex);
      reports.push_back(r);
    };
  }
  std::vector<distributed::WatchdogReport> take() {
    const std::lock_guard lock(mutex);
    return reports;
  }
};

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

}  // namespace

TEST_CASE("a single rank has nothing to watch", "[mpi][watchdog]") {
  Recorder recorder;
  distributed::Watchdog watchdog(MPI_COMM_SELF, kTimeout, recorder.handler());
  {
    const distributed::Watchdog::Wait wait(&watchdog, "a wait nobody can lose");
    sleep_s(3 * kTimeout);
  }
  CHECK(recorder.take().empty());
}

TEST_CASE("a wait on a busy peer is reported with what the peer does, and goes on", "[mpi][watchdog]") {
  if (mpi_world() < 2) return;
  Recorder recorder;
  distributed::Watchdog watchdog(MPI_COMM_WORLD, kTimeout, recorder.handler());
  MPI_Barrier(MPI_COMM_WORLD);
  if (mpi_rank() == 0) {
    watchdog.set_activity("step 3: minibatch end");
    const distributed::Watchdog::Wait wait(&watchdog, "the test barrier");
    sleep_s(5 * kTimeout);
  } else {
    watchdog.set_activity("step 3: microbatch 2/9");
    sleep_s(5.5 * kTimeout);
  }
  const auto reports = recorder.take();
  MPI_Barrier(MPI_COMM_WORLD);
  if (mpi_rank() != 0) {
    CHECK(reports.empty());  // never waited
    return;
  }
  REQUIRE(!reports.empty());
  const auto& r = reports.front();
  CHECK(!r.fatal);
  CHECK(r.rank == 0);
  CHECK(r.what == "the test barrier");
  CHECK(r.waited_s >= kTimeout);
  REQUIRE(static_cast<int>(r.peers.size()) == mpi_world() - 1);
  for (const auto& p : r.peers) {
    CHECK(p.answered);
    CHECK(!p.waiting);
    CHECK(p.where == "step 3: microbatch 2/9");
    CHECK(p.seconds >= kTimeout);
  }
  const std::string message = r.message();
  CHECK(message.find("rank 1 is busy with 'step 3: microbatch 2/9'") != std::string::npos);
  CHECK(message.find("during 'step 3: minibatch end'") != std::string::npos);
  CHECK(message.find("ending the job") == std::string::npos);
}

TEST_CASE("every rank waiting is a deadlock: fatal, each peer's wait named", "[mpi][watchdog]") {
  if (mpi_world() < 2) return;
  Recorder recorder;
  distributed::Watchdog watchdog(MPI_COMM_WORLD, kTimeout, recorder.handler());
  MPI_Barrier(MPI_COMM_WORLD);
  {
    const distributed::Watchdog::Wait wait(&watchdog, "wait of rank " + std::to_string(mpi_rank()));
    sleep_s(5 * kTimeout);
  }
  const auto reports = recorder.take();
  MPI_Barrier(MPI_COMM_WORLD);
  REQUIRE(!reports.empty());
  const auto& r = reports.front();
  CHECK(r.fatal);
  for (const auto& p : r.peers) {
    CHECK(p.answered);
    CHECK(p.waiting);
    CHECK(p.where == "wait of rank " + std::to_string(p.rank));
  }
  CHECK(r.message().find("every rank is waiting") != std::string::npos);
  CHECK(r.message().find("ending the job") != std::string::npos);
}

TEST_CASE("a peer that does not answer is named as dead or frozen", "[mpi][watchdog]") {
  if (mpi_world() < 2) return;
  Recorder recorder;
  auto watchdog = std::make_unique<distributed::Watchdog>(MPI_COMM_WORLD, kTimeout, recorder.handler());
  MPI_Barrier(MPI_COMM_WORLD);
  const int silent = mpi_world() - 1;  // stops answering, like a frozen process
  if (mpi_rank() == silent) watchdog.reset();
  MPI_Barrier(MPI_COMM_WORLD);
  if (mpi_rank() == 0) {
    watchdog->set_activity("step 7: checkpoint: every rank's shards written?");
    const distributed::Watchdog::Wait wait(watchdog.get(), "an all-reduce");
    sleep_s(6 * kTimeout);
  } else if (mpi_rank() != silent) {
    watchdog->set_activity("computing");
    sleep_s(6.5 * kTimeout);
  }
  std::vector<distributed::WatchdogReport> reports = recorder.take();
  MPI_Barrier(MPI_COMM_WORLD);
  if (mpi_rank() != 0) return;
  REQUIRE(!reports.empty());
  const auto& r = reports.front();
  CHECK(r.fatal);
  for (const auto& p : r.peers) CHECK(p.answered == (p.rank != silent));
  const std::string message = r.message();
  CHECK(message.find("rank(s) " + std::to_string(silent) + " did not answer: dead, frozen or unreachable") != std::string::npos);
  CHECK(message.find("in 'an all-reduce' during 'step 7: checkpoint: every rank's shards written?'") != std::string::npos);
  CHECK(message.find("ending the job") != std::string::npos);
}
