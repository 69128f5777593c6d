#pragma once
// MpiSession: MPI initialized with MPI_THREAD_MULTIPLE for the lifetime of the object (the ODC
// progress thread talks to MPI next to the compute thread). Works under mpirun and as a singleton.
#include <string>

namespace odc::distributed {

class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  // Ends every rank of the job with `code`: used when one rank fails alone, so the others do not
  // wait forever in a collective.
  [[noreturn]] void abort(int code) const;

 private:
  int rank_ = 0;
  int world_size_ = 1;
};

}  // namespace odc::distributed
