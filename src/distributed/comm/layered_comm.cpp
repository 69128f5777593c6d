#include "odc/distributed/comm/layered_comm.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include <fmt/format.h>

#include "odc/core/error.h"
#include "odc/distributed/group/watchdog.h"

namespace odc::distributed {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

CommWaits sum(const CommWaits& a, const CommWaits& b) {
  return {a.gather_s + b.gather_s, a.push_s + b.push_s, a.barrier_s + b.barrier_s};
}

void require_host_state(const ShardStore& store, std::string_view layout) {
  if (store.device() != nullptr) {
    fail("train.sharding {} keeps its shards in host memory (its cross-host steps run over MPI on host buffers); "
         "with state on {} use train.sharding full", layout, store.device()->name());
  }
}
}  // namespace

HybridComm::HybridComm(Comm& inner, ShardStore& store, MPI_Comm replicas, Watchdog* watchdog)
    : inner_(inner), store_(store), replicas_(replicas), watchdog_(watchdog) {
  require_host_state(store_, "hybrid");
}

void HybridComm::end_minibatch() {
  inner_.end_minibatch();
  const auto start = Clock::now();
  const TraceScope trace(tracer_, "wait", "gradient sum across hosts");
  const Watchdog::Wait wait(watchdog_, "the hybrid layout's gradient sum across hosts (every replica's all-reduce)");
  // The accumulators of every unit lie back to back (ShardStore): one all-reduce, in pieces that
  // fit MPI's int counts.
  float* grads = store_.grad(0);
  const std::int64_t total = store_.layout().owned_elements();
  constexpr std::int64_t kPiece = std::int64_t{1} << 30;
  for (std::int64_t begin = 0; begin < total; begin += kPiece) {
    const int count = static_cast<int>(std::min(kPiece, total - begin));
    MPI_Allreduce(MPI_IN_PLACE, grads + begin, count, MPI_FLOAT, MPI_SUM, replicas_);
  }
  replica_sum_s_ += seconds_since(start);
}

CommWaits HybridComm::waits() const {
  CommWaits w = inner_.waits();
  w.barrier_s += replica_sum_s_;
  return w;
}

void HybridComm::set_tracer(Tracer* tracer) {
  tracer_ = tracer;
  inner_.set_tracer(tracer);
}

HpzComm::HpzComm(Comm& primary, ShardStore& primary_store, Comm& secondary, ShardStore& secondary_store)
    : primary_(primary), primary_store_(primary_store), secondary_(secondary), secondary_store_(secondary_store) {
  require_host_state(primary_store_, "hpz");
  require_host_state(secondary_store_, "hpz");
  ODC_CHECK(primary_store_.layout().num_units() == secondary_store_.layout().num_units(),
            "hpz: the primary and secondary layouts have different units");
}

void HpzComm::begin_minibatch() {
  primary_.begin_minibatch();  // the last optimizer step is published, the accumulators zeroed
  const auto start = Clock::now();
  const double gathers_before = primary_.waits().gather_s;
  {
    const TraceScope trace(tracer_, "wait", "secondary copy refresh");
    const ShardLayout& mine = secondary_store_.layout();
    for (int u = 0; u < mine.num_units(); ++u) {
      const float* full = primary_.acquire(u);
      const float* slice = full + mine.shard_begin(u, mine.rank());
      // The host's layout pads the unit to a multiple of its ranks; the world's to a multiple of
      // all ranks, which is at least as long: every slice lies inside the gathered buffer.
      std::copy(slice, slice + mine.unit(u).shard, secondary_store_.master(u));
      primary_.release(u);
    }
  }
  refresh_s_ += seconds_since(start);
  refresh_gather_s_ += primary_.waits().gather_s - gathers_before;  // inside refresh_s_ already
  secondary_.begin_minibatch();  // the host's ranks see each other's refreshed slices
}

void HpzComm::end_minibatch() {
  secondary_.end_minibatch();
  primary_.end_minibatch();
}

CommWaits HpzComm::waits() const {
  CommWaits w = sum(primary_.waits(), secondary_.waits());
  w.gather_s -= refresh_gather_s_;
  w.barrier_s += refresh_s_;
  return w;
}

CommResources HpzComm::resources() const {
  const CommResources a = primary_.resources();
  const CommResources b = secondary_.resources();
  return {a.thread_cpu_s + b.thread_cpu_s, a.registered_bytes + b.registered_bytes, a.endpoints + b.endpoints};
}

void HpzComm::set_tracer(Tracer* tracer) {
  tracer_ = tracer;
  primary_.set_tracer(tracer);
  secondary_.set_tracer(tracer);
}

}  // namespace odc::distributed
