#pragma once
// PushAccumulator: how an ODC owner applies the gradient chunks its clients push, one for every
// transport (the serve loop hands it each chunk, wherever the bytes came from).
//
// Plain ODC adds each chunk into the owner's fp32 gradient accumulator as it arrives, so the order
// of the float additions (which client first, within a microbatch and across them) follows the
// transport and two identical runs differ in the last bits.
//
// Deterministic (comm.deterministic): every client's chunks go into a buffer of their own, each
// applied in the client's push order (a chunk carries its push's sequence number per unit and
// minibatch; one that arrives before its predecessors is held until they are in), and at the
// minibatch end the gradient is the left fold of the clients' buffers in rank order:
//   grad = ((0 + acc_0) + acc_1) + acc_2 ...
// The cost: one fp32 buffer per client of this rank's shard size (together one full copy of the
// model's parameters per rank) and a pass over them at the end of each minibatch.
//
// The adds run where the accumulator lives (AccumulatorMemory): on the calling thread for host
// memory, or issued on a device's lanes (the IPC transport's PeerMemory); odc_transport.h.
#include <cstdint>
#include <memory>
#include <vector>

#include "odc/distributed/shard/shard_layout.h"
#include "odc/distributed/transport/odc_transport.h"

namespace odc::distributed {

class PushAccumulator {
 public:
  // `grads`: the owner's accumulator (layout.owned_elements() floats, unit u at
  // layout.owned_offset(u)), zeroed by its store at each minibatch start. Deterministic:
  // `client_buffers` holds world_size() * owned_elements() floats in `memory` (null: host buffers
  // of this object's own).
  PushAccumulator(const ShardLayout& layout, float* grads, bool deterministic, AccumulatorMemory& memory,
                  float* client_buffers = nullptr);

  bool deterministic() const { return deterministic_; }
  // Bytes of the clients' buffers this object holds itself (deterministic with host buffers of its
  // own; 0 when they were given, as the IPC transport's memory).
  std::int64_t own_bytes() const { return static_cast<std::int64_t>(own_buffers_.size() * sizeof(float)); }
  // Starts a minibatch: zeroes the clients' buffers, forgets sequence positions.
  void begin();
  // The `sequence`-th push (0-based, this minibatch) of unit `unit` from `client`: `count` floats
  // at element `offset` of this rank's shard of the unit. Validated first (a corrupt header must
  // not scribble). Deterministic: applied now if every earlier push of (client, unit) is in, else
  // copied and held (a transport whose chunks arrive in order never holds). Called from one thread.
  void add(int client, int unit, std::int32_t sequence, std::int64_t offset, const float* data, std::int64_t count);
  // Every chunk is applied: deterministic, fold the clients' buffers into `grads` in rank order.
  // Fails if a push is still held (its predecessor never came: a protocol error).
  void finish();
  // Pushes held now (for tests and diagnostics).
  std::size_t held() const { return held_.size(); }
  // Memory of the per-client buffers (0 unless deterministic).
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
  float* client_buffer(int client) const;

  const ShardLayout& layout_;
  float* grads_;
  bool deterministic_;
  AccumulatorMemory& memory_;
  std::vector<float> own_buffers_;  // deterministic, host: [client][owned element]
  float* buffers_ = nullptr;        // deterministic: [client][owned element]
  std::vector<std::int64_t> applied_;  // [client * units + unit]: elements applied so far
  std::vector<Held> held_;
};

}  // namespace odc::distributed
