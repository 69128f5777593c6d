#include "odc/distributed/odc_comm.h"

#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "odc/core/error.h"
#include "odc/distributed/watchdog.h"

namespace odc::distributed {

namespace {
constexpr int kWeightSlots = 3;  // as CollectiveComm: current + prefetched + tied embedding
constexpr int kGradSlots = 3;    // being computed + being pushed + tied embedding held open
}  // namespace

OdcComm::OdcComm(ShardStore& store, UcxTransport& transport, MPI_Comm comm)
    : store_(store), transport_(transport), comm_(comm) {
  const auto& layout = store.layout();
  if (layout.world_size() != transport.world_size() || layout.rank() != transport.rank()) {
    fail("shard layout is for rank {} of {}, but the transport has rank {} of {}", layout.rank(), layout.world_size(),
         transport.rank(), transport.world_size());
  }
  ODC_CHECK(store.master_base() == transport.exposed().data(), "masters must live in the transport's exposed region");
  const std::int64_t largest = layout.largest_padded_unit();
  for (int i = 0; i < kWeightSlots; ++i) {
    weights_.push_back({Tensor(Shape{largest}, DType::f32), std::make_unique<Completion>(layout.world_size())});
  }
  for (int i = 0; i < kGradSlots; ++i) {
    grads_.push_back({Tensor(Shape{largest}, DType::f32), std::make_unique<Completion>(layout.world_size())});
  }
  pushes_to_.assign(static_cast<std::size_t>(layout.world_size()), 0);
  transport_.set_receiver([this](const PushHeader& header, const float* data) { accumulate(header, data); });
}

OdcComm::~OdcComm() {
  // Operations still in flight reference our buffers; on an error path the transport is torn down
  // without waiting (see UcxTransport), otherwise everything completed in end_minibatch.
  transport_.set_receiver([](const PushHeader&, const float*) {});
}

void OdcComm::accumulate(const PushHeader& header, const float* data) {
  // Runs on the progress thread. Validate before writing: a corrupt header must not scribble.
  const auto& layout = store_.layout();
  if (header.tag < 0 || header.tag >= layout.num_units() || header.offset < 0 || header.count < 0 ||
      header.offset + header.count > layout.unit(header.tag).shard) {
    fail("rank {}: invalid gradient push from rank {} (unit {}, offset {}, count {})", transport_.rank(), header.from,
         header.tag, header.offset, header.count);
  }
  float* acc = store_.grad(header.tag) + header.offset;
  for (std::int64_t i = 0; i < header.count; ++i) acc[i] += data[i];
}

void OdcComm::timed_wait(Completion& completion, const std::string& what, int unit, bool gather) {
  if (completion.done()) {
    transport_.wait(completion, what);  // reports errors of completed operations
    return;
  }
  const TraceScope trace(tracer_, "wait", (gather ? "gather wait " : "push wait ") + store_.layout().unit(unit).name,
                         {{"unit", unit}});
  const auto start = std::chrono::steady_clock::now();
  transport_.wait(completion, what);
  (gather ? waits_.gather_s : waits_.push_s) += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

OdcComm::WeightSlot* OdcComm::find_weights(int unit) {
  for (auto& w : weights_) {
    if (w.unit == unit) return &w;
  }
  return nullptr;
}

OdcComm::WeightSlot& OdcComm::start_gather(int unit) {
  WeightSlot* slot = nullptr;
  for (auto& w : weights_) {
    if (!w.in_use && !w.fetching) {
      slot = &w;
      break;
    }
  }
  ODC_CHECK(slot != nullptr, "no free weight buffer for unit {}", unit);
  const auto& layout = store_.layout();
  const std::int64_t shard = layout.unit(unit).shard;
  slot->unit = unit;
  slot->fetching = true;
  // Start with the next owner and wrap, so that ranks do not all read from rank 0 first.
  for (int i = 0; i < layout.world_size(); ++i) {
    const int owner = (transport_.rank() + 1 + i) % layout.world_size();
    transport_.get(owner, store_.offset(unit), slot->buffer.data<float>() + layout.shard_begin(unit, owner), shard,
                   *slot->completion);
  }
  return *slot;
}

void OdcComm::prefetch(int unit) {
  if (unit < 0 || unit >= store_.layout().num_units() || find_weights(unit) != nullptr) return;
  for (const auto& w : weights_) {
    if (!w.in_use && !w.fetching) {
      start_gather(unit);
      return;
    }
  }
}

const float* OdcComm::acquire(int unit) {
  WeightSlot* slot = find_weights(unit);
  if (slot == nullptr) slot = &start_gather(unit);
  timed_wait(*slot->completion, fmt::format("gather of unit {}", unit), unit, true);
  slot->fetching = false;
  ODC_CHECK(!slot->in_use, "unit {} acquired twice", unit);
  slot->in_use = true;
  return slot->buffer.data<float>();
}

void OdcComm::release(int unit) {
  WeightSlot* slot = find_weights(unit);
  ODC_CHECK(slot != nullptr && slot->in_use, "release of unit {} that is not acquired", unit);
  slot->in_use = false;
  slot->unit = -1;  // reshard after use, as the collective baseline does
}

void OdcComm::drain(GradSlot& slot) {
  if (!slot.pushing) return;
  timed_wait(*slot.completion, fmt::format("gradient push of unit {}", slot.unit), slot.unit, false);
  slot.pushing = false;
}

float* OdcComm::grad_buffer(int unit) {
  GradSlot* slot = nullptr;
  for (auto& g : grads_) {
    ODC_CHECK(!(g.open && g.unit == unit), "gradient buffer of unit {} requested twice", unit);
    // Prefer a slot whose pushes are done; else the one pushing (we wait for it).
    if (!g.open && (slot == nullptr || (slot->pushing && !g.pushing))) slot = &g;
  }
  ODC_CHECK(slot != nullptr, "no free gradient buffer for unit {}", unit);
  drain(*slot);  // a client reuses its buffer only after every owner has taken the data
  slot->unit = unit;
  slot->open = true;
  std::memset(slot->buffer.raw(), 0, static_cast<std::size_t>(store_.layout().unit(unit).padded) * sizeof(float));
  return slot->buffer.data<float>();
}

void OdcComm::push_grad(int unit) {
  const auto& layout = store_.layout();
  const std::int64_t shard = layout.unit(unit).shard;
  for (auto& g : grads_) {
    if (!(g.open && g.unit == unit)) continue;
    g.open = false;
    g.pushing = true;
    for (int i = 0; i < layout.world_size(); ++i) {
      const int owner = (transport_.rank() + 1 + i) % layout.world_size();
      pushes_to_[static_cast<std::size_t>(owner)] +=
          transport_.push(owner, unit, 0, g.buffer.data<float>() + layout.shard_begin(unit, owner), shard, *g.completion);
    }
    return;
  }
  ODC_CHECK(false, "push of unit {} without an open gradient buffer", unit);
}

void OdcComm::begin_minibatch() {
  for (auto& w : weights_) {
    ODC_CHECK(!w.in_use && !w.fetching, "weights of unit {} still held at minibatch start", w.unit);
    w.unit = -1;
  }
  store_.zero_grads();
  transport_.reset_received();
  std::fill(pushes_to_.begin(), pushes_to_.end(), 0);
  // Publishes every rank's optimizer step (no gather may read half-updated masters) and the
  // zeroed accumulators (no push may land before them).
  const auto start = std::chrono::steady_clock::now();
  {
    const Watchdog::Wait wait(watchdog_, "the minibatch-start barrier");
    MPI_Barrier(comm_);
  }
  waits_.barrier_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void OdcComm::end_minibatch() {
  const auto start = std::chrono::steady_clock::now();
  for (auto& g : grads_) {
    ODC_CHECK(!g.open, "gradient of unit {} never pushed", g.unit);
    if (g.pushing) {
      transport_.wait(*g.completion, fmt::format("gradient push of unit {}", g.unit));
      g.pushing = false;
    }
  }
  // A prefetch the model never acquired must land before the optimizer rewrites the masters.
  for (auto& w : weights_) {
    if (w.fetching) {
      transport_.wait(*w.completion, fmt::format("gather of unit {}", w.unit));
      w.fetching = false;
      w.unit = -1;
    }
  }
  // Every owner learns how many pushes each client sent it, then waits until it applied them all.
  std::vector<std::int64_t> expected(pushes_to_.size());
  {
    const Watchdog::Wait wait(watchdog_, "the minibatch-end exchange of push counts");
    MPI_Alltoall(pushes_to_.data(), 1, MPI_INT64_T, expected.data(), 1, MPI_INT64_T, comm_);
  }
  transport_.wait_received(expected, "the minibatch-end wait for gradient pushes");
  waits_.barrier_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void OdcComm::all_reduce_sum(std::span<double> values) {
  const Watchdog::Wait wait(watchdog_, "an all-reduce");
  MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_DOUBLE, MPI_SUM, comm_);
}

}  // namespace odc::distributed
