#include "odc/distributed/comm/nccl_comm.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "nccl_communicator.h"
#include "odc/core/error.h"
#include "odc/kernels/cuda_cast.h"
#include "odc/kernels/cuda_device.h"

namespace odc::distributed {

namespace cu = kernels::cuda;

namespace {

// The checks that must pass before the pool allocates its buffers on `device`.
const ShardLayout& checked_layout(ShardStore& store, HostGroup& group, backend::Backend& device) {
  const ShardLayout& layout = store.layout();
  if (device.device().kind != DeviceKind::cuda || device.native_stream() == nullptr) {
    fail("rank {}: the NCCL collective comm runs on a CUDA backend, but was given the {} backend", group.rank(),
         device.name());
  }
  if (store.device() != &device) {
    fail("rank {}: the NCCL collective comm needs a shard store that holds its state on the comm's CUDA backend "
         "(masters, gradients and moments in that GPU's memory); this store {}",
         group.rank(), store.device() == nullptr ? "lives in host memory" : "belongs to another backend");
  }
  if (layout.world_size() != group.size() || layout.rank() != group.rank()) {
    fail("shard layout is for rank {} of {}, but the group has rank {} of {}", layout.rank(), layout.world_size(),
         group.rank(), group.size());
  }
  return layout;
}

std::size_t count_of(std::int64_t n) { return static_cast<std::size_t>(n); }

void wait_on(void* stream, const cu::Event& event, const char* what) {
  cu::check_cuda(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event.handle()), 0),
                 what);
}

}  // namespace

struct NcclComm::Impl {
  Impl(ShardStore& store, HostGroup& group, backend::Backend& device, GatherDtype dtype, double timeout_s)
      : layout(store.layout()), comm(group, device.device().index, timeout_s), compute(device.native_stream()) {
    std::int64_t largest_shard = 0;
    for (int u = 0; u < layout.num_units(); ++u) largest_shard = std::max(largest_shard, layout.unit(u).shard);
    const auto allocate = [&](DType type, std::int64_t count) {
      memory.emplace_back(device.memory(), type);
      return memory.back().get(count).data;
    };
    gathered.resize(UnitBufferPool::kWeightBuffers);
    pushed.resize(UnitBufferPool::kGradBuffers);
    for (std::size_t i = 0; i < pushed.size(); ++i) {
      received.push_back(static_cast<float*>(allocate(DType::f32, largest_shard)));
    }
    if (dtype == GatherDtype::bf16) {
      for (std::size_t i = 0; i < gathered.size(); ++i) {
        staging.push_back(static_cast<std::uint16_t*>(allocate(DType::bf16, layout.largest_padded_unit())));
      }
      shadow = static_cast<std::uint16_t*>(allocate(DType::bf16, layout.owned_elements()));
    }
    gather_pending.assign(gathered.size(), false);
    push_pending.assign(pushed.size(), false);
  }

  NcclOperation op(std::string_view kind, int unit) const { return {kind, unit, layout.unit(unit).name}; }

  // The comm stream's next work waits for everything submitted to the compute stream so far.
  void follow_compute() {
    compute_ready.record(compute);
    stream.wait(compute_ready);
  }

  // Waits (bounded) until the comm stream has run everything given to it; never throws.
  void drain_stream() noexcept {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(comm.timeout_s());
    try {
      while (!stream.query() && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    } catch (const std::exception&) {
      // A failed stream has nothing left to run.
    }
  }

  const ShardLayout& layout;
  NcclCommunicator comm;
  void* compute;   // the backend's stream: every model op, the accumulation, the shadow's refresh
  cu::Stream stream;  // the collectives, in issue order
  cu::Event compute_ready;
  std::vector<cu::Event> gathered;  // per weight buffer: its all-gather (and widening) is done
  std::vector<cu::Event> pushed;    // per gradient buffer: its reduce-scatter is done
  std::vector<backend::Buffer> memory;     // the backend's memory behind the pointers below
  std::vector<std::uint16_t*> staging;     // per weight buffer, bf16 gathers: the gathered bf16 unit
  std::vector<float*> received;            // per gradient buffer: this rank's reduced slice (fp32)
  std::uint16_t* shadow = nullptr;         // bf16 gathers: the master shards rounded to bf16
  std::vector<bool> gather_pending, push_pending;  // started and not yet waited for
};

NcclComm::NcclComm(ShardStore& store, HostGroup& group, backend::Backend& device, GatherDtype gather_dtype,
                   double timeout_s)
    : ShardedComm(checked_layout(store, group, device), &device),
      store_(store),
      gather_dtype_(gather_dtype),
      rank_(group.rank()),
      world_size_(group.size()),
      impl_(std::make_unique<Impl>(store, group, device, gather_dtype,
                                   timeout_s)) {}

NcclComm::~NcclComm() {
  // Transfers never waited for (an exception unwound the minibatch) may never complete: their
  // peers are gone or failing too. Aborting stops NCCL's kernels; either way the comm stream must
  // be idle before the buffers it writes return to the allocator.
  const auto unwaited = [](const std::vector<bool>& pending) {
    return std::find(pending.begin(), pending.end(), true) != pending.end();
  };
  impl_->comm.close(!unwaited(impl_->gather_pending) && !unwaited(impl_->push_pending));
  impl_->drain_stream();
}

void NcclComm::start_gather(int unit, int buffer, float* full) {
  Impl& m = *impl_;
  const auto b = static_cast<std::size_t>(buffer);
  const NcclOperation op = m.op("all-gather", unit);
  const std::int64_t shard = m.layout.unit(unit).shard;
  m.follow_compute();
  if (gather_dtype_ == GatherDtype::f32) {
    m.comm.enqueued(ncclAllGather(store_.master(unit), full, count_of(shard), ncclFloat32, m.comm.get(op),
                                  static_cast<cudaStream_t>(m.stream.handle())),
                    op);
  } else {
    std::uint16_t* staged = m.staging[b];
    m.comm.enqueued(ncclAllGather(m.shadow + store_.offset(unit), staged, count_of(shard), ncclBfloat16,
                                  m.comm.get(op), static_cast<cudaStream_t>(m.stream.handle())),
                    op);
    cu::cast_bf16_to_f32(staged, full, m.layout.unit(unit).padded, m.stream.handle());
    cu::check_last_launch("cast_bf16_to_f32 (widening a bf16 all-gather)");
  }
  m.gathered[b].record(m.stream);
  m.gather_pending[b] = true;
}

bool NcclComm::gather_done(int buffer) { return impl_->gathered[static_cast<std::size_t>(buffer)].query(); }

void NcclComm::wait_gather(int unit, int buffer) {
  Impl& m = *impl_;
  const auto b = static_cast<std::size_t>(buffer);
  m.comm.check(m.op("all-gather", unit));
  // The model's kernels on this unit run after the gather; the host goes on queueing them.
  wait_on(m.compute, m.gathered[b], "cudaStreamWaitEvent (compute stream after an all-gather)");
  m.gather_pending[b] = false;
}

void NcclComm::start_push(int unit, int buffer, const float* full) {
  Impl& m = *impl_;
  const auto b = static_cast<std::size_t>(buffer);
  const NcclOperation op = m.op("reduce-scatter", unit);
  m.follow_compute();  // the gradient is complete
  m.comm.enqueued(ncclReduceScatter(full, m.received[b], count_of(m.layout.unit(unit).shard), ncclFloat32, ncclSum,
                                    m.comm.get(op), static_cast<cudaStream_t>(m.stream.handle())),
                  op);
  m.pushed[b].record(m.stream);
  m.push_pending[b] = true;
}

bool NcclComm::push_done(int buffer) { return impl_->pushed[static_cast<std::size_t>(buffer)].query(); }

void NcclComm::wait_push(int unit, int buffer) {
  Impl& m = *impl_;
  const auto b = static_cast<std::size_t>(buffer);
  m.comm.await(m.pushed[b], m.op("reduce-scatter", unit));
  // The pool zeroes the buffer and the accumulation reads the slice on the compute stream next.
  wait_on(m.compute, m.pushed[b], "cudaStreamWaitEvent (compute stream after a reduce-scatter)");
  m.push_pending[b] = false;
}

void NcclComm::finish_push(int unit, int buffer) {
  Impl& m = *impl_;
  const std::int64_t shard = m.layout.unit(unit).shard;
  cu::add_f32(store_.grad(unit), m.received[static_cast<std::size_t>(buffer)], shard, m.compute);
  cu::check_last_launch("add_f32 (a reduced gradient slice into its accumulator)");
}

void NcclComm::begin_minibatch() {
  Impl& m = *impl_;
  m.comm.check({"minibatch start", -1, {}});
  store_.zero_grads();
  pool_.check_idle();
  if (gather_dtype_ == GatherDtype::bf16) {
    // The optimizer's last step is on the compute stream before this; gathers follow it.
    const std::int64_t n = m.layout.owned_elements();
    cu::cast_f32_to_bf16(store_.master_base(), m.shadow, n, m.compute);
    cu::check_last_launch("cast_f32_to_bf16 (the bf16 shadow of the master shards)");
  }
}

void NcclComm::end_minibatch() { pool_.drain(); }

}  // namespace odc::distributed
