#pragma once
// NcclCommunicator: one rank's NCCL communicator (private to src/distributed/nccl_*.cpp): the
// bootstrap over a HostGroup, every bounded host-side wait on it, its errors and its teardown.
// NcclComm (nccl_comm.h) issues the collectives through it.
//
// The communicator is non-blocking (ncclConfig_t::blocking = 0): initialization and an enqueue may
// return ncclInProgress, and every wait polls ncclCommGetAsyncError against the deadline instead
// of blocking inside NCCL, so a peer that never arrives is a timeout naming the operation. Any
// failure aborts the communicator (its kernels stop) before the error is thrown; later use throws.
#include <nccl.h>

#include <string>
#include <string_view>

#include "odc/distributed/group/host_group.h"
#include "odc/kernels/cuda_device.h"

namespace odc::distributed {

// What a wait is for, named in its errors: "all-gather of unit 3 (layer.2)"; unit < 0: no unit.
struct NcclOperation {
  std::string_view kind;
  int unit = -1;
  std::string_view unit_name;
};

class NcclCommunicator {
 public:
  // Collective over `group`, whose ranks become the communicator's: fails (on every rank, with the
  // same message) when two ranks hold the same GPU, then creates the communicator on CUDA device
  // `device` from rank 0's unique id, waiting at most `timeout_s` for every rank to join.
  NcclCommunicator(HostGroup& group, int device, double timeout_s);
  // close(true) unless closed already; never throws.
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  double timeout_s() const { return timeout_s_; }
  // The communicator for the next call; odc::Error naming `op` once it was aborted.
  ncclComm_t get(const NcclOperation& op) const;
  // The result of enqueueing `op`: an error aborts and throws; ncclInProgress waits (bounded) until
  // NCCL has put the operation on its stream, so an event recorded next comes after it.
  void enqueued(ncclResult_t result, const NcclOperation& op);
  // Throws (after aborting) if NCCL has reported an asynchronous error. Does not wait.
  void check(const NcclOperation& op);
  // Waits on the host until `event` has completed, at most timeout_s, watching NCCL's errors.
  void await(const kernels::cuda::Event& event, const NcclOperation& op);
  bool aborted() const { return state_ == State::aborted; }
  // Ends the communicator: `clean` finalizes (waiting at most timeout_s for its operations) and
  // destroys it, otherwise (an error path, transfers never waited for) it is aborted. Idempotent,
  // never throws.
  void close(bool clean) noexcept;

 private:
  // Polls until ready() and NCCL is not in progress; errors and the deadline abort and throw.
  template <typename Ready>
  void poll(const NcclOperation& op, Ready&& ready);
  [[noreturn]] void abort_and_fail(const NcclOperation& op, const std::string& problem);

  int rank_ = 0;
  int size_ = 1;
  double timeout_s_;
  enum class State { open, closed, aborted };
  ncclComm_t comm_ = nullptr;  // null once closed or aborted
  State state_ = State::open;
};

}  // namespace odc::distributed
