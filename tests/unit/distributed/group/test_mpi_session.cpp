// MpiSession's launcher detection and its MPI-free session: a tool started directly (no mpirun)
// can run as one process without MPI's runtime (a single-GPU machine need not have one).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "odc/distributed/group/mpi_session.h"

using odc::distributed::MpiSession;

namespace {

// Sets or unsets environment variables for the test's scope, restoring them afterwards.
class ScopedEnv {
 public:
  void set(const char* name, const char* value) {
    remember(name);
    if (value != nullptr) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        ::setenv(name.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }

 private:
  void remember(const char* name) {
    const char* old = std::getenv(name);
    saved_.emplace_back(name, old != nullptr ? std::optional<std::string>(old) : std::nullopt);
  }
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

const char* const kLauncherVariables[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"};

}  // namespace

TEST_CASE("a process is launched by MPI exactly when a launcher's variable is set", "[distributed]") {
  ScopedEnv env;
  for (const char* name : kLauncherVariables) env.set(name, nullptr);
  CHECK_FALSE(MpiSession::launched_by_mpi());
  for (const char* name : kLauncherVariables) {
    env.set(name, "2");
    CHECK(MpiSession::launched_by_mpi());
    env.set(name, nullptr);
  }
  CHECK_FALSE(MpiSession::launched_by_mpi());
}

TEST_CASE("a session without MPI is rank 0 of 1 and never initializes MPI", "[distributed]") {
  MpiSession session = MpiSession::without_mpi();
  CHECK(session.rank() == 0);
  CHECK(session.world_size() == 1);
  CHECK_FALSE(session.initialized());
  MpiSession moved(std::move(session));
  CHECK_FALSE(moved.initialized());
  CHECK(moved.world_size() == 1);
}
