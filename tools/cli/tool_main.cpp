#include "cli/tool_main.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <thread>

#include "cli/command_line.h"
#include "odc/core/error.h"
#include "odc/distributed/group/local_launch.h"

namespace odc::cli {
namespace {

// The exit code for the exception being handled, after printing what it says. `speaks` is false
// on the MPI ranks that leave help, usage errors and errors met on every rank to rank 0.
int exit_code_of_current_exception(std::string_view tool, bool speaks) {
  const std::string name(tool);
  try {
    throw;
  } catch (const HelpRequested& help) {
    if (speaks) std::fputs(help.usage().c_str(), stdout);
    return kExitSuccess;
  } catch (const UsageError& e) {
    if (speaks) std::fprintf(stderr, "%s: %s\n\n%s", e.command().c_str(), e.what(), e.usage().c_str());
    return kExitUsage;
  } catch (const SameOnEveryRank& e) {
    if (speaks) std::fprintf(stderr, "%s: error: %s\n", name.c_str(), e.what());
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: error: %s\n", name.c_str(), e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: unexpected error: %s\n", name.c_str(), e.what());
  }
  return kExitFailure;
}

// A rank other than 0 of `odc-run --local N`: like MPI's ranks, it leaves help and usage errors
// to rank 0.
bool local_rank_other_than_0() {
  const char* rank = std::getenv(distributed::kLocalRankVariable);
  return rank != nullptr && std::string_view(rank) != "0";
}

}  // namespace

int run_tool(std::string_view tool, const std::function<int()>& body) {
  try {
    return body();
  } catch (...) {
    return exit_code_of_current_exception(tool, true);
  }
}

int run_mpi_tool(std::string_view tool, int& argc, char**& argv,
                 const std::function<int(const distributed::MpiSession&)>& body, bool mpi_optional,
                 double startup_timeout_s) {
  std::unique_ptr<distributed::MpiSession> mpi;
  try {
    if (mpi_optional && !distributed::MpiSession::launched_by_mpi()) {
      mpi = std::make_unique<distributed::MpiSession>(distributed::MpiSession::without_mpi());
    } else {
      mpi = std::make_unique<distributed::MpiSession>(&argc, &argv, startup_timeout_s, std::string(tool));
    }
    return body(*mpi);
  } catch (...) {
    const bool rank0 = mpi == nullptr || (mpi->initialized() ? mpi->rank() == 0 : !local_rank_other_than_0());
    bool waited = false;
    try {
      throw;
    } catch (const SameOnEveryRank&) {
      if (!rank0 && mpi->initialized()) {
        // Rank 0 read the same and ends the job (MPI_Abort) before this wait is over, unless its
        // input differed: then this rank reports it, and ends the job itself.
        std::this_thread::sleep_for(std::chrono::duration<double>(kSameErrorWaitS));
        waited = true;
      }
    } catch (...) {
    }
    const int code = exit_code_of_current_exception(tool, rank0 || waited);
    if (code == kExitFailure) {
      std::fflush(stderr);
      if (mpi && mpi->world_size() > 1) mpi->abort(code);
    }
    return code;
  }
}

}  // namespace odc::cli
