#pragma once
// OrderedAccumulator: deterministic gradient accumulation for an ODC owner (comm.deterministic).
//
// Plain ODC adds each push into the owner's accumulator as it arrives, so the order of the float
// additions (which client first, within a microbatch and across them) follows the network and two
// identical runs differ in the last bits. Here every client's pushes go into a buffer of their
// own, each applied in the client's push order (a push carries its sequence number per unit and
// minibatch; one that arrives early is held until its predecessors are in), and the minibatch's
// gradient is the left fold of the clients' buffers in rank order:
//   grad = ((acc_0 + acc_1) + acc_2) + ...
// The cost: one fp32 buffer per client of this rank's shard size (together one full copy of the
// model's parameters per rank) and a pass over them at the end of each minibatch.
#include <cstdint>
#include <vector>

#include "odc/distributed/shard_layout.h"

namespace odc::distributed {

class OrderedAccumulator {
 public:
  explicit OrderedAccumulator(const ShardLayout& layout);

  // Starts a minibatch: zeroes the buffers, forgets sequence positions.
  void begin();
  // The `sequence`-th push (0-based, this minibatch) of unit `unit` from `client`: `count` floats
  // at element `offset` of this rank's shard of the unit. Pushes of one sequence number may come
  // in disjoint chunks, in any order. Applied now if every earlier push of (client, unit) is in,
  // else copied and held. Called from one thread.
  void add(int client, int unit, std::int32_t sequence, std::int64_t offset, const float* data, std::int64_t count);
  // grads[i] (owned_elements() floats, unit u at layout.owned_offset(u)) = the fold above. Fails if
  // a push is still held (its predecessor never came: a protocol error).
  void fold_into(float* grads) const;
  // Pushes held now (for tests and diagnostics).
  std::size_t held() const { return held_.size(); }
  // Memory of the per-client buffers.
  std::int64_t bytes() const;

 private:
  struct Held {
    int client;
    int unit;
    std::int32_t sequence;
    std::int64_t offset;
    std::vector<float> data;
  };
  bool ready(int client, int unit, std::int32_t sequence) const;
  void apply(int client, int unit, std::int64_t offset, const float* data, std::int64_t count);

  const ShardLayout& layout_;
  std::vector<std::vector<float>> per_client_;  // [client][owned element]
  std::vector<std::int64_t> applied_;           // [client * units + unit]: elements applied so far
  std::vector<Held> held_;
};

}  // namespace odc::distributed
