#include "odc/distributed/group/mpi_session.h"

#include <cstdlib>

#include <mpi.h>

#include "odc/core/error.h"
#include "odc/distributed/group/startup_deadline.h"

namespace odc::distributed {

MpiSession::MpiSession(int* argc, char*** argv, double startup_timeout_s, const std::string& tool) {
  int provided = 0;
  {
    // MPI_Init waits for every rank of the job (its modex): one frozen or lost there would hang
    // this rank forever, before any Watchdog exists.
    const StartupDeadline deadline(startup_timeout_s, tool,
                                   "MPI initialisation (MPI_Init_thread: every rank of the job must start and join)");
    if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
      fail("MPI_Init_thread failed");
    }
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    MPI_Finalize();
    fail("MPI provides thread level {}, but MPI_THREAD_MULTIPLE ({}) is required", provided, MPI_THREAD_MULTIPLE);
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
  initialized_ = true;
}

bool MpiSession::launched_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

MpiSession::~MpiSession() {
  if (!initialized_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void MpiSession::abort(int code) const {
  if (initialized_) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace odc::distributed
