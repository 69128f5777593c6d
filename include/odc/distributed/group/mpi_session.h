#pragma once
// MpiSession: MPI initialized with MPI_THREAD_MULTIPLE for the lifetime of the object (the ODC
// progress thread talks to MPI next to the compute thread). Works under mpirun and as a singleton.
#include <string>

namespace odc::distributed {

class MpiSession {
 public:
  // startup_timeout_s > 0: MPI initialisation that takes longer ends the process with a message
  // naming it (StartupDeadline; `tool` heads the message).
  MpiSession(int* argc, char*** argv, double startup_timeout_s = 0.0, const std::string& tool = "odc");
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  // A session of one process that never initializes MPI: for a tool started directly, where MPI's
  // singleton start would need MPI's runtime on the machine (a lent GPU machine has none).
  static MpiSession without_mpi() { return MpiSession(); }
  MpiSession(MpiSession&& other) noexcept
      : rank_(other.rank_), world_size_(other.world_size_), initialized_(other.initialized_) {
    other.initialized_ = false;
  }
  // Whether a launcher (mpirun/mpiexec/srun: Open MPI, PMIx or PMI) started this process.
  static bool launched_by_mpi();

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  bool initialized() const { return initialized_; }
  // Ends every rank of the job with `code`: used when one rank fails alone, so the others do not
  // wait forever in a collective.
  [[noreturn]] void abort(int code) const;

 private:
  MpiSession() = default;
  int rank_ = 0;
  int world_size_ = 1;
  bool initialized_ = false;
};

}  // namespace odc::distributed
