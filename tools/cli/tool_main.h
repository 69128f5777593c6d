#pragma once
// The body of every tool's main: runs it and turns its outcome into the tools' common exit codes
// and messages.
//   0  success; --help / -h (HelpRequested): the usage on stdout
//   1  bad input or a failure: odc::Error as "TOOL: error: message" on stderr (any other
//      exception "TOOL: unexpected error: ...")
//   2  a command-line mistake (UsageError): "COMMAND: message", a blank line, the usage on stderr
#include <functional>
#include <string_view>
#include <utility>

#include "odc/core/error.h"
#include "odc/distributed/group/mpi_session.h"

namespace odc::cli {

inline constexpr int kExitSuccess = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

int run_tool(std::string_view tool, const std::function<int()>& body);

// An error every rank of a job meets alike (odc::SameOnEveryRank: reading the config, or the data
// file, they all read): printed once, not once per rank. run_mpi_tool lets rank 0 print it and end
// the job; another rank says nothing and waits kSameErrorWaitS for that, printing it (and ending
// the job) only if the job is still there: then its input differed from rank 0's (an environment
// variable of its host). Local ranks (odc-run --local N) share one host's environment and files:
// only local rank 0 prints; each exits 1.
using odc::SameOnEveryRank;
using odc::same_on_every_rank;
inline constexpr double kSameErrorWaitS = 5.0;

// The same for a tool that runs under mpirun: `body` runs inside an MPI session (MPI_Init may
// rewrite argc/argv, hence the references). Every rank parses the same command line, so help and
// usage errors are printed by rank 0 alone; an error is printed by the rank that hit it, which
// then ends the whole job (MPI_Abort) so that no rank waits forever for it.
// `mpi_optional`: started directly (no launcher, MpiSession::launched_by_mpi()), the tool runs as
// one process without initializing MPI at all (MpiSession::without_mpi()); its body must then not
// use MPI. Started by `odc-run --local N`, only local rank 0 prints help and usage errors.
// `startup_timeout_s` > 0: MPI initialisation longer than that ends the process naming it (a peer
// frozen or lost before the job's watchdogs exist; distributed::StartupDeadline).
int run_mpi_tool(std::string_view tool, int& argc, char**& argv,
                 const std::function<int(const distributed::MpiSession&)>& body, bool mpi_optional = false,
                 double startup_timeout_s = 0.0);

}  // namespace odc::cli
