#pragma once
// StagedComm: a comm over host memory (the UCX OdcComm, the MPI CollectiveComm) serving a model
// whose state lives on a device — the inter-node path of GPU ranks where the transport cannot
// read or write device memory (Debian's UCX is built without CUDA, Open MPI is not CUDA-aware).
// Everything the inner comm moves is staged through host memory:
//
//   begin_minibatch  the device masters (just stepped by the optimizer) are downloaded into the
//                    inner comm's host store, which then serves peers' gathers
//   acquire(u)       the inner comm's host unit (gathered from every owner) is uploaded into a
//                    device unit buffer; release(u) releases both
//   push_grad(u)     the device gradient is downloaded into the inner comm's gradient buffer,
//                    which the inner comm pushes to the owners
//   end_minibatch    the host accumulators (every rank's pushes applied) are uploaded into the
//                    device store's accumulators, where the optimizer reads them
//
// The protocol, its waits and its results are the inner comm's: same losses as the inner comm
// on host state. The copies are synchronous (no overlap of staging with compute beyond the inner
// comm's prefetch): a correct path across hosts, not a fast one; ranks of one host use CUDA IPC.
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "odc/backend/backend.h"
#include "odc/distributed/comm/comm.h"
#include "odc/distributed/shard/shard_store.h"

namespace odc::distributed {

class StagedComm final : public Comm {
 public:
  // Owns `inner`, which moves `host_store`'s memory (its own store, as ODC's; or
  // `owned_host_store`, given here when the inner comm does not own its store, as the collective's).
  // The model computes on `device`, whose memory holds `device_store` (both stores have the same
  // layout); both must outlive this object.
  StagedComm(std::unique_ptr<Comm> inner, ShardStore& host_store, ShardStore& device_store, backend::Backend& device,
             std::unique_ptr<ShardStore> owned_host_store = nullptr);

  std::string_view name() const override { return inner_.name(); }
  int rank() const override { return inner_.rank(); }
  int world_size() const override { return inner_.world_size(); }
  bool needs_equal_microbatches() const override { return inner_.needs_equal_microbatches(); }
  void begin_minibatch() override;
  void end_minibatch() override;
  CommWaits waits() const override { return inner_.waits(); }
  CommResources resources() const override { return inner_.resources(); }
  void set_tracer(Tracer* tracer) override { inner_.set_tracer(tracer); }

  const float* acquire(int unit) override;
  void release(int unit) override;
  void prefetch(int unit) override { inner_.prefetch(unit); }
  float* grad_buffer(int unit) override;
  void push_grad(int unit) override;

 private:
  backend::Buffer take_buffer();
  std::int64_t padded(int unit) const { return host_store_.layout().unit(unit).padded; }

  std::unique_ptr<ShardStore> owned_host_store_;  // destroyed after the inner comm that uses it
  std::unique_ptr<Comm> owned_inner_;
  Comm& inner_;
  ShardStore& host_store_;
  ShardStore& device_store_;
  backend::Backend& device_;
  std::map<int, backend::Buffer> weights_;    // units the model holds: their device copies
  std::map<int, backend::Buffer> gradients_;  // units whose gradient buffer is open
  std::vector<backend::Buffer> spare_;        // released buffers, reused (no steady-state allocation)
  backend::Buffer grad_staging_;              // end_minibatch: the host accumulators on their way up
};

}  // namespace odc::distributed
