#pragma once
// InProcessGroup: a HostGroup of N ranks that are threads of one process — the fake that unit
// tests of multi-rank logic use (checkpoint commits, exports, traces, the trainer's reductions)
// without MPI. Each exchange meets all N threads. It is stricter than MPI: a call whose kind or
// `what` differs from rank 0's is a protocol error, and so is a rank that does not arrive within
// the timeout; either is thrown on every rank that takes part, naming both sides.
#include <memory>
#include <string>
#include <vector>

#include "odc/distributed/group/host_group.h"

namespace odc::distributed {

class InProcessGroup final : public HostGroup {
 public:
  // The N members, one per thread (member r is rank r).
  static std::vector<std::unique_ptr<InProcessGroup>> create(int size, double timeout_s = 30.0);

  int rank() const override { return rank_; }
  int size() const override;
  void barrier(std::string_view what) override;
  void all_reduce_sum(std::span<double> values, std::string_view what) override;
  void gather_to(int root, std::span<const std::byte> mine, std::span<std::byte> all, std::string_view what) override;
  std::vector<std::string> gather_text(std::string_view mine, std::string_view what) override;
  void broadcast(std::string& text, std::string_view what) override;
  void announce(std::string activity) override;

  // The last activity this rank announced (tests check what a component reports).
  std::string activity() const;

 private:
  struct Shared;
  InProcessGroup(std::shared_ptr<Shared> shared, int rank);
  // Meets every rank: returns every rank's contribution, in rank order.
  std::vector<std::string> exchange(std::string_view kind, std::string_view what, std::string contribution);

  std::shared_ptr<Shared> shared_;
  int rank_;
};

}  // namespace odc::distributed
