// The ODC protocol over both of its transports, ranks as threads of one process (no MPI):
//   ipc  OdcComm over IpcTransport on host shared memory (the transport CUDA IPC runs on GPUs, the
//        same code over another PeerMemory): chunked pushes through a few data slots reused only
//        after their owner's ack;
//   ucx  OdcComm over UcxTransport, bootstrapped over the same in-process group.
// Both: gathers of every owner's shard, unequal push counts per rank, sums on the owners,
// deterministic accumulation (the one PushAccumulator and PushLedger under both). IPC only:
// bf16 gathers and a stalled owner named after the timeout.
#include <cmath>
#include <cstring>
#include <latch>
#include <random>

#include <catch2/catch.hpp>

#include "odc/distributed/comm/comm_factory.h"
#include "odc/distributed/comm/odc_comm.h"
#include "odc/distributed/transport/ipc/ipc_transport.h"
#include "odc/distributed/transport/ipc/peer_mailbox.h"
#include "odc/kernels/cast.h"
#include "odc/model/units.h"
#include "unit/rank_threads.h"
#include "unit/tiny_model.h"

using namespace odc;
using distributed::CommKind;

namespace {

constexpr std::uint64_t kSeed = 11;

distributed::CommOptions ipc_options(int chunk_floats, int slots, bool deterministic = false,
                                     distributed::GatherDtype gather = distributed::GatherDtype::f32,
                                     distributed::TransportKind transport = distributed::TransportKind::ipc) {
  distributed::CommOptions o;
  o.kind = CommKind::odc;
  o.odc_transport = transport;
  o.gather_dtype = gather;
  // UCX's messages are at least 4 KiB (comm.chunk_bytes): the tiny shards travel whole there.
  o.transport.chunk_bytes = transport == distributed::TransportKind::ucx ? 4096 : chunk_floats * 4;
  o.transport.max_inflight = slots;
  o.transport.timeout_s = 20;
  o.deterministic = deterministic;
  return o;
}

// How often rank r pushes unit u in minibatch m: unequal between ranks, as ODC allows.
int pushes_of(int r, int u, int m) { return 1 + (r + u + m) % 3; }

// Rank r's k-th gradient of unit u: small integers, so any summation order is exact.
float grad_value(int r, int u, int k, std::int64_t i) { return static_cast<float>((r + 1) + 10 * k + u + i % 7); }

const char* transport_name(distributed::TransportKind t) { return t == distributed::TransportKind::ucx ? "ucx" : "ipc"; }

constexpr distributed::TransportKind kTransports[] = {distributed::TransportKind::ipc, distributed::TransportKind::ucx};

}  // namespace

TEST_CASE("ODC: gathers give every owner's shard, chunked pushes through few slots sum on the owners",
          "[distributed][ipc][ucx]") {
  const auto config = test::tiny_model(3);
  const auto units = model::build_unit_layouts(config);
  const distributed::ShardLayout whole(units, 1, 0);
  const distributed::ShardStore reference(whole, units, config, kSeed);
  for (const auto transport : kTransports) {
  for (const int world : {2, 3, 4}) {
    for (const int slots : {1, 3}) {
      DYNAMIC_SECTION(transport_name(transport) << ", world " << world << ", " << slots << " slots per client") {
        std::vector<std::string> seen(static_cast<std::size_t>(world));
        const auto errors = test::on_every_rank(world, [&](distributed::HostGroup& group) {
          const int r = group.rank();
          const distributed::ShardLayout layout(units, world, r);
          // 5-float chunks: every slice is cut in several chunks, and slots are reused within a push.
          auto stack = distributed::make_comm(ipc_options(5, slots, false, distributed::GatherDtype::f32, transport),
                                              group, layout, units, config, kSeed);
          auto& comm = stack->comm();
          std::string& report = seen[static_cast<std::size_t>(r)];
          if (comm.name() != "odc") report += "comm is " + std::string(comm.name()) + "; ";
          for (int m = 0; m < 2; ++m) {
            comm.begin_minibatch();
            for (int u = 0; u < layout.num_units(); ++u) {
              comm.prefetch((u + 1) % layout.num_units());
              const float* full = comm.acquire(u);
              for (std::int64_t i = 0; i < layout.unit(u).numel; ++i) {
                if (full[i] != reference.master(u)[i]) {
                  report += "gathered unit " + std::to_string(u) + " differs at " + std::to_string(i) + "; ";
                  break;
                }
              }
              comm.release(u);
              for (int k = 0; k < pushes_of(r, u, m); ++k) {
                float* g = comm.grad_buffer(u);
                for (std::int64_t i = 0; i < layout.unit(u).padded; ++i) g[i] += grad_value(r, u, k, i);
                comm.push_grad(u);
              }
            }
            comm.end_minibatch();
            auto& store = stack->store();
            for (int u = 0; u < layout.num_units(); ++u) {
              for (std::int64_t j = 0; j < layout.unit(u).shard; ++j) {
                const std::int64_t i = layout.shard_begin(u, r) + j;
                double expected = 0;
                for (int c = 0; c < world; ++c) {
                  for (int k = 0; k < pushes_of(c, u, m); ++k) expected += grad_value(c, u, k, i);
                }
                if (store.grad(u)[j] != static_cast<float>(expected)) {
                  report += "minibatch " + std::to_string(m) + " unit " + std::to_string(u) + " element " +
                            std::to_string(i) + ": " + std::to_string(store.grad(u)[j]) + " != " +
                            std::to_string(expected) + "; ";
                  break;
                }
              }
            }
          }
          const auto resources = comm.resources();
          // IPC maps every peer's memory; UCX holds an endpoint to each rank, itself included.
          const int endpoints = transport == distributed::TransportKind::ucx ? world : world - 1;
          if (resources.endpoints != endpoints) report += "endpoints " + std::to_string(resources.endpoints) + "; ";
          if (resources.registered_bytes <= 0) report += "no registered bytes; ";
        });
        for (int r = 0; r < world; ++r) {
          INFO("rank " << r);
          CHECK(errors[static_cast<std::size_t>(r)] == "");
          CHECK(seen[static_cast<std::size_t>(r)] == "");
        }
      }
    }
  }
  }
}

TEST_CASE("ODC, deterministic: each owner adds each client's pushes in order, clients folded in rank order",
          "[distributed][ipc][ucx][deterministic]") {
  for (const auto transport : kTransports) {
  DYNAMIC_SECTION(transport_name(transport)) {
  const auto config = test::tiny_model(2);
  const auto units = model::build_unit_layouts(config);
  constexpr int world = 3;
  // Values whose sums depend on the order (random fp32), pushed an unequal number of times.
  auto value = [](int r, int u, int k, std::int64_t i) {
    std::mt19937 rng(static_cast<unsigned>(1000003 * r + 7919 * u + 101 * k + i));
    return std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng) * std::pow(10.0f, static_cast<float>(i % 5) - 2);
  };
  std::vector<std::vector<std::vector<float>>> got(2, std::vector<std::vector<float>>(world));
  for (int trial = 0; trial < 2; ++trial) {
    const auto errors = test::on_every_rank(world, [&](distributed::HostGroup& group) {
      const int r = group.rank();
      const distributed::ShardLayout layout(units, world, r);
      auto stack = distributed::make_comm(ipc_options(3, 2, true, distributed::GatherDtype::f32, transport), group,
                                          layout, units, config, kSeed);
      auto& comm = stack->comm();
      comm.begin_minibatch();
      // The second trial pushes in another interleaving of units (and so of arrivals).
      for (int step = 0; step < layout.num_units(); ++step) {
        const int u = trial == 0 ? step : layout.num_units() - 1 - step;
        for (int k = 0; k < pushes_of(r, u, 0); ++k) {
          float* g = comm.grad_buffer(u);
          for (std::int64_t i = 0; i < layout.unit(u).padded; ++i) g[i] = value(r, u, k, i);
          comm.push_grad(u);
        }
      }
      comm.end_minibatch();
      const float* grads = stack->store().grad(0);
      got[static_cast<std::size_t>(trial)][static_cast<std::size_t>(r)].assign(grads, grads + layout.owned_elements());
    });
    for (const auto& e : errors) CHECK(e == "");
  }
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r);
    const distributed::ShardLayout layout(units, world, r);
    const auto& first = got[0][static_cast<std::size_t>(r)];
    CHECK(first == got[1][static_cast<std::size_t>(r)]);  // bitwise
    // The fixed order: client c's pushes summed in its order, then clients in rank order.
    for (int u = 0; u < layout.num_units(); ++u) {
      for (std::int64_t j = 0; j < layout.unit(u).shard; ++j) {
        const std::int64_t i = layout.shard_begin(u, r) + j;
        float total = 0.0f;
        for (int c = 0; c < world; ++c) {
          float client = 0.0f;
          for (int k = 0; k < pushes_of(c, u, 0); ++k) client += value(c, u, k, i);
          total += client;
        }
        REQUIRE(first[static_cast<std::size_t>(layout.owned_offset(u) + j)] == total);
      }
    }
  }
  }
  }
}

TEST_CASE("IPC ODC, bf16 gathers: the unit buffers hold the masters rounded to bf16", "[distributed][ipc]") {
  const auto config = test::tiny_model(2);
  const auto units = model::build_unit_layouts(config);
  const distributed::ShardLayout whole(units, 1, 0);
  const distributed::ShardStore reference(whole, units, config, kSeed);
  std::vector<std::string> seen(2);
  const auto errors = test::on_every_rank(2, [&](distributed::HostGroup& group) {
    const int r = group.rank();
    const distributed::ShardLayout layout(units, 2, r);
    auto stack = distributed::make_comm(ipc_options(64, 2, false, distributed::GatherDtype::bf16), group, layout, units,
                                        config, kSeed);
    auto& comm = stack->comm();
    comm.begin_minibatch();
    for (int u = 0; u < layout.num_units(); ++u) {
      const std::int64_t n = layout.unit(u).numel;
      std::vector<std::uint16_t> bf16(static_cast<std::size_t>(n));
      std::vector<float> rounded(static_cast<std::size_t>(n));
      kernels::cpu::cast_f32_to_bf16(reference.master(u), bf16.data(), n);
      kernels::cpu::cast_bf16_to_f32(bf16.data(), rounded.data(), n);
      const float* full = comm.acquire(u);
      if (std::memcmp(full, rounded.data(), static_cast<std::size_t>(n) * 4) != 0) {
        seen[static_cast<std::size_t>(r)] += "unit " + std::to_string(u) + " is not the bf16-rounded masters; ";
      }
      bool any_rounded = false;
      for (std::int64_t i = 0; i < n; ++i) any_rounded |= full[i] != reference.master(u)[i];
      if (!any_rounded && n > 8) seen[static_cast<std::size_t>(r)] += "unit " + std::to_string(u) + " was not rounded; ";
      comm.release(u);
    }
    comm.end_minibatch();
  });
  for (int r = 0; r < 2; ++r) {
    CHECK(errors[static_cast<std::size_t>(r)] == "");
    CHECK(seen[static_cast<std::size_t>(r)] == "");
  }
}

TEST_CASE("IPC ODC: an owner that stops taking pushes is named after comm.timeout_s", "[distributed][ipc]") {
  const auto config = test::tiny_model(2);
  const auto units = model::build_unit_layouts(config);
  std::latch rank0_done(1);
  const auto errors = test::on_every_rank(2, [&](distributed::HostGroup& group) {
    const int r = group.rank();
    const distributed::ShardLayout layout(units, 2, r);
    auto options = ipc_options(2, 1);
    options.transport.timeout_s = 0.5;
    auto stack = distributed::make_comm(options, group, layout, units, config, kSeed);
    stack->comm().begin_minibatch();
    if (r == 1) {
      // Frozen: nothing frees rank 0's slots at rank 1 any more (its memory stays mapped).
      dynamic_cast<distributed::IpcTransport&>(dynamic_cast<distributed::OdcComm&>(stack->comm()).transport())
          .freeze_serving();
      rank0_done.wait();
      return;
    }
    struct Done {
      std::latch& latch;
      ~Done() { latch.count_down(); }
    } const done{rank0_done};
    float* g = stack->comm().grad_buffer(1);
    g[0] = 1.0f;
    stack->comm().push_grad(1);  // many 2-float chunks through one slot
    stack->comm().end_minibatch();
  });
  CHECK_THAT(errors[0], Catch::Contains("rank 0: gradient push of unit 1 to rank 1: no data slot freed for") &&
                            Catch::Contains("(comm.timeout_s): rank 1 (pid") &&
                            Catch::Contains("is alive but not progressing"));
  CHECK(errors[1] == "");
}

TEST_CASE("peer mailbox: a slot is free until posted, holds its header, and is free again once released",
          "[distributed][ipc]") {
  std::vector<std::string> seen(2);
  const auto errors = test::on_every_rank(2, [&](distributed::HostGroup& group) {
    std::string prefix = group.is_root() ? distributed::unique_segment_prefix() : std::string();
    group.broadcast(prefix, "prefix");
    distributed::PeerMailbox box(group, prefix, 2);
    std::string& report = seen[static_cast<std::size_t>(group.rank())];
    if (!box.alive(1 - group.rank())) report += "peer not alive; ";
    if (group.rank() == 0) {
      if (!box.slot_free(1, 0) || !box.slot_free(1, 1)) report += "fresh slots not free; ";
      box.post(1, 1, distributed::PushHeader{3, 0, 40, 5, 1, 2});
      if (box.slot_free(1, 1)) report += "posted slot still free; ";
      group.barrier("posted");
      group.barrier("released");
      if (!box.slot_free(1, 1)) report += "released slot not free; ";
    } else {
      group.barrier("posted");
      distributed::PushHeader m;
      if (box.posted(0, 0, m)) report += "slot 0 posted; ";
      if (!box.posted(0, 1, m)) report += "slot 1 not posted; ";
      if (m.tag != 3 || m.sequence != 2 || m.offset != 40 || m.count != 5 || m.from != 0 || m.slot != 1) {
        report += "header garbled; ";
      }
      box.release(0, 1);
      if (box.posted(0, 1, m)) report += "released slot still posted; ";
      group.barrier("released");
    }
    group.barrier("done");  // ranks of one process read each other's mapping: none unmaps early
  });
  for (int r = 0; r < 2; ++r) {
    CHECK(errors[static_cast<std::size_t>(r)] == "");
    CHECK(seen[static_cast<std::size_t>(r)] == "");
  }
}
