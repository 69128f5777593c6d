// The context exchange's choice, sizes, checks and factory (context_exchange.h).
#include "odc/distributed/transport/context/context_exchange.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "odc/core/error.h"
#include "odc/distributed/group/mpi_host_group.h"
#include "odc/distributed/group/shared_segment.h"
#include "odc/distributed/transport/context/mpi_context_exchange.h"
#include "odc/distributed/transport/context/peer_context_exchange.h"
#if defined(ODC_HAVE_CUDA)
#include "odc/distributed/transport/ipc/cuda_peer_memory.h"
#endif

namespace odc::distributed {

void ContextExchangeOptions::validate() const {
  ODC_CHECK(timeout_s > 0, "the context exchange's timeout must be positive, found {} s", timeout_s);
  ODC_CHECK(max_exposed_bytes >= 0, "the context exchange's exposed size must not be negative, found {} bytes",
            max_exposed_bytes);
}

std::string_view context_exchange_kind_name(ContextExchangeKind kind) {
  return kind == ContextExchangeKind::peer_memory ? "peer memory" : "MPI";
}

ContextExchangeKind choose_context_exchange(int hosts, bool over_mpi, const ContextExchangeOptions& options) {
  if (options.force_mpi) {
    if (!over_mpi) fail("the MPI context exchange was asked for, but the ranks do not meet over MPI");
    return ContextExchangeKind::mpi;
  }
  if (hosts <= 1) return ContextExchangeKind::peer_memory;
  if (!over_mpi) fail("a context exchange across {} hosts needs the ranks to meet over MPI", hosts);
  return ContextExchangeKind::mpi;
}

PlannedMemory planned_context_exchange(const ContextExchangeOptions& options, ContextExchangeKind kind, int world,
                                       bool device_state) {
  PlannedMemory m;
  const std::int64_t exposed = options.max_exposed_bytes;
  if (kind == ContextExchangeKind::peer_memory) {
    // Exported outside the backend's allocator (cudaMalloc for CUDA IPC, POSIX shm on the host).
    m.add("context exchange region", exposed, fmt::format("the largest exchange's rows, {}", mib_text(exposed)),
          device_state, false);
    m.add("context exchange signals", 64 + 128 * static_cast<std::int64_t>(world),
          fmt::format("{} ranks x 2 cache lines, host shared memory", world), false, false);
    m.note(fmt::format("the context exchange maps the {} peers' regions here (shared, not allocated)", world - 1));
    return m;
  }
  if (device_state) {
    // Rows on a device travel through host buffers; received rows are uploaded into a device
    // buffer before they are copied to their places.
    // In whole 4-byte words: the backend moves fp32 elements.
    const std::int64_t staged = (exposed + 3) / 4 * 4;
    m.add("context exchange send staging", staged, "the largest exchange's rows, host", false, false);
    m.add("context exchange receive staging", staged, "the largest exchange's rows, host", false, false);
    m.add("context exchange upload staging", staged, "the largest exchange's rows", true, true);
  }
  return m;
}

namespace detail {

std::string describe_group(const model::ContextSplit& split) {
  return fmt::format("member {} of ranks [{}]", split.member, fmt::join(split.ranks, ", "));
}

void check_exchange(const model::ContextSplit& split, std::span<const model::ExchangePiece> pieces, int rank,
                    int world, std::int64_t mine_bytes, std::int64_t into_bytes, std::int64_t max_exposed_bytes,
                    std::string_view what) {
  const int k = split.k();
  if (k < 1 || split.member < 0 || split.member >= k || split.ranks[static_cast<std::size_t>(split.member)] != rank) {
    fail("{} (context group tag {:#x}): rank {} is not member {} of ranks [{}]", what, split.tag, rank, split.member,
         fmt::join(split.ranks, ", "));
  }
  std::vector<int> sorted = split.ranks;
  std::sort(sorted.begin(), sorted.end());
  if (sorted.front() < 0 || sorted.back() >= world || std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    fail("{} (context group tag {:#x}): ranks [{}] are not distinct ranks of {}", what, split.tag,
         fmt::join(split.ranks, ", "), world);
  }
  if (mine_bytes < 0 || into_bytes < 0 || mine_bytes > max_exposed_bytes) {
    fail("{} (context group tag {:#x}): rank {} exposes {} bytes, but the context exchange was sized for at most {} "
         "bytes per exchange (receiving into {} bytes)",
         what, split.tag, rank, mine_bytes, max_exposed_bytes, into_bytes);
  }
  for (const auto& p : pieces) {
    if (p.from < 0 || p.from >= k || p.to < 0 || p.to >= k || p.src < 0 || p.dst < 0 || p.bytes < 0) {
      fail("{} (context group tag {:#x}): a piece from member {} to member {} (bytes {} at {} to {}) in a group of {}",
           what, split.tag, p.from, p.to, p.bytes, p.src, p.dst, k);
    }
    if (p.from == split.member && p.src + p.bytes > mine_bytes) {
      fail("{} (context group tag {:#x}): a piece of {} bytes at byte {} of this rank's rows, which are {} bytes", what,
           split.tag, p.bytes, p.src, mine_bytes);
    }
    if (p.to == split.member && p.dst + p.bytes > into_bytes) {
      fail("{} (context group tag {:#x}): a piece of {} bytes to byte {} of rank {}'s receiving buffer of {} bytes",
           what, split.tag, p.bytes, p.dst, rank, into_bytes);
    }
  }
}

}  // namespace detail

namespace {
int host_count(const HostGroup& group) {
  const auto* mpi = dynamic_cast<const MpiHostGroup*>(&group);
  return mpi != nullptr ? mpi->topology().hosts : 1;
}
}  // namespace

std::unique_ptr<GroupContextExchange> make_context_exchange(HostGroup& group, backend::Backend* device,
                                                            const ContextExchangeOptions& options) {
  options.validate();
  backend::Backend* state = device != nullptr && device->device().kind != DeviceKind::cpu ? device : nullptr;
  const ContextExchangeKind kind = choose_context_exchange(host_count(group), group.over_mpi(), options);
  if (kind == ContextExchangeKind::mpi) {
    auto* mpi = dynamic_cast<MpiHostGroup*>(&group);
    ODC_CHECK(mpi != nullptr, "the MPI context exchange needs an MPI host group");
    return std::make_unique<MpiContextExchange>(*mpi, state, options);
  }
  if (state != nullptr) {
#if defined(ODC_HAVE_CUDA)
    return std::make_unique<PeerContextExchange>(make_cuda_peer_memory(*state), group, options);
#else
    fail("the context exchange of rows on the {} device needs a CUDA build", state->name());
#endif
  }
  std::string prefix = group.is_root() ? unique_segment_prefix() : std::string();
  group.broadcast(prefix, "the context exchange's region names");
  return std::make_unique<PeerContextExchange>(make_host_peer_memory(prefix, group.rank()), group, options);
}

}  // namespace odc::distributed
