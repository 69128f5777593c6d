// NCCL's tuning model of a ring all-gather / reduce-scatter (odc/sim/nccl_ring.h) with known answers
// worked by hand from its table: the protocol the tuner picks by message size, the latency per hop
// inside a node and across nodes, the bus bandwidth cap; the link model and odc-sim's keys use it.
#include <catch2/catch.hpp>
#include <limits>

#include "odc/core/device_specs.h"
#include "odc/core/error.h"
#include "odc/sim/layout_costs.h"
#include "odc/sim/link_model.h"
#include "odc/sim/nccl_ring.h"
#include "odc/sim/schedule.h"
#include "odc/sim/sim_config.h"
#include "unit/sim/sim_links.h"

using namespace odc::sim;
using Catch::Matchers::Contains;


TEST_CASE("NCCL ring: a decoder layer in one node takes Simple at the capped bus bandwidth", "[sim][nccl]") {
  const NcclRing ring;  // 235 GB/s cap, every protocol
  const double bytes = 466e6;  // a 7B decoder layer in bf16
  const auto t = nccl_ring_time(ring, 8, 8, 300e9, bytes);
  CHECK(t.protocol == NcclProtocol::simple);
  // Simple: 8.4 us + 7 NVLink hops x 3.4 us; 235 GB/s bus = 235 * 8/7 GB/s algorithm bandwidth.
  CHECK(t.latency == Approx(32.2e-6));
  CHECK(t.bus_bandwidth == Approx(235e9));
  CHECK(t.seconds == Approx(32.2e-6 + bytes / (235e9 * 8.0 / 7.0)));
  // LL128 would have taken 23.3 us + bytes / (0.92 * 235 GB/s * 8/7): slower for this size.
  CHECK(t.seconds < 23.3e-6 + bytes / (0.92 * 235e9 * 8.0 / 7.0));
}

TEST_CASE("NCCL ring: small messages take LL, medium ones LL128", "[sim][nccl]") {
  const NcclRing ring;
  const auto small = nccl_ring_time(ring, 8, 8, 300e9, 65536.0);
  CHECK(small.protocol == NcclProtocol::ll);
  // LL: 3.6 us + 7 x 0.47 us; a third of the bus bandwidth in one node.
  CHECK(small.latency == Approx(6.89e-6));
  CHECK(small.seconds == Approx(6.89e-6 + 65536.0 / (235e9 / 3.0 * 8.0 / 7.0)));
  // Between LL's range (to 2.3 MB) and Simple's (from 27.5 MB) LL128 wins: at 8 MiB LL takes
  // 6.89 + 93.7 us, LL128 23.3 + 33.9 us, Simple 32.2 + 31.2 us.
  CHECK(nccl_ring_time(ring, 8, 8, 300e9, 1048576.0).protocol == NcclProtocol::ll);
  CHECK(nccl_ring_time(ring, 8, 8, 300e9, 8388608.0).protocol == NcclProtocol::ll128);
  CHECK(nccl_ring_time(ring, 8, 8, 300e9, 32e6).protocol == NcclProtocol::simple);
  // Only the protocols enabled (NCCL_PROTO) are chosen from.
  const auto simple_only = NcclRing::with_protocols("Simple", "k");
  const auto forced = nccl_ring_time(simple_only, 8, 8, 300e9, 65536.0);
  CHECK(forced.protocol == NcclProtocol::simple);
  CHECK(forced.seconds == Approx(32.2e-6 + 65536.0 / (235e9 * 8.0 / 7.0)));
}

TEST_CASE("NCCL ring: across nodes one step per node crosses the network at the node's bandwidth", "[sim][nccl]") {
  const NcclRing ring;
  const double bytes = 1e9;
  // 16 ranks on 2 nodes: 15 steps, 1 over the network; the ring's slowest hop is the node's 100 GB/s.
  const auto t = nccl_ring_time(ring, 16, 8, 100e9, bytes);
  CHECK(t.protocol == NcclProtocol::simple);
  CHECK(t.latency == Approx((8.4 + 14 * 3.4 + 1 * 9.6) * 1e-6));
  CHECK(t.seconds == Approx(t.latency + bytes * 15.0 / 16.0 / 100e9));
  // 32 ranks on 4 nodes: 3 network steps of 28 + 3 = 31.
  CHECK(nccl_ring_time(ring, 32, 8, 100e9, bytes).latency == Approx((8.4 + 28 * 3.4 + 3 * 9.6) * 1e-6));
  // LL across nodes: a quarter of the bus bandwidth and NVLink hops 1.8 x 0.47 us.
  const auto ll = nccl_ring_time(NcclRing::with_protocols("ll", "k"), 16, 8, 100e9, 4096.0);
  CHECK(ll.latency == Approx((3.6 + 14 * 0.47 * 1.8 + 2.7) * 1e-6));
  CHECK(ll.bus_bandwidth == Approx(25e9));
  // One rank per node: LL128 reaches 0.7 of the bus bandwidth instead of 0.92.
  CHECK(nccl_ring_time(NcclRing::with_protocols("ll128", "k"), 4, 1, 100e9, 1e6).bus_bandwidth == Approx(70e9));
  // Nothing to move: no time.
  CHECK(nccl_ring_time(ring, 1, 8, 100e9, bytes).seconds == 0.0);
  CHECK(nccl_ring_time(ring, 8, 8, 100e9, 0.0).seconds == 0.0);
}

TEST_CASE("NCCL ring: protocol lists and caps are checked", "[sim][nccl]") {
  CHECK_THROWS_WITH(NcclRing::with_protocols("ll,tree", "sim.nccl_protocols"),
                    Contains("sim.nccl_protocols") && Contains("'tree'"));
  CHECK_THROWS_WITH(NcclRing::with_protocols(" , ", "sim.nccl_protocols"), Contains("no protocol"));
  const auto some = NcclRing::with_protocols(" LL128 ,simple", "k");
  CHECK((!some.ll && some.ll128 && some.simple));
  CHECK(nccl_bus_cap(odc::device_spec("a100-80gb")) == Approx(235e9));
  CHECK(nccl_bus_cap(odc::device_spec("h100-sxm")) == std::numeric_limits<double>::infinity());
  // Uncapped: the link's bandwidth holds.
  NcclRing open;
  open.max_bus_bandwidth = std::numeric_limits<double>::infinity();
  CHECK(nccl_ring_time(open, 8, 8, 450e9, 1e9).bus_bandwidth == Approx(450e9));
}

TEST_CASE("the link model's collectives take NCCL's time with collective_model nccl, ODC's do not", "[sim][nccl]") {
  LinkModel link = test::a100_nodes(16, 20e-6);
  const double bytes = 1e9;
  const double ring = link.transfer_time(CommKind::collective, bytes);
  const double p2p = link.transfer_time(CommKind::odc, bytes);
  CHECK(ring == Approx(20e-6 + bytes * 15.0 / 16.0 / 100e9));
  link.collective = CollectiveModel::nccl;
  CHECK(link.transfer_time(CommKind::collective, bytes) == Approx(nccl_ring_time(link.nccl, 16, 8, 100e9, bytes).seconds));
  CHECK(link.transfer_time(CommKind::odc, bytes) == p2p);
  link.nccl.max_bus_bandwidth = 0.0;
  CHECK_THROWS_WITH(link.validate(), Contains("sim.nccl_max_bus_gbps"));
  CHECK(parse_collective_model("nccl", "k") == CollectiveModel::nccl);
  CHECK_THROWS_WITH(parse_collective_model("mpi", "sim.collective_model"), Contains("sim.collective_model"));
}

TEST_CASE("odc-sim's NCCL, padding and root-unit keys", "[sim][nccl]") {
  const auto a100 = build_setup(load_sim_config("", {"sim.collective_model=nccl"}), "");
  CHECK(a100.link.collective == CollectiveModel::nccl);
  CHECK(a100.link.nccl.max_bus_bandwidth == Approx(235e9));
  CHECK(!a100.dummy_padding);
  const auto h100 = build_setup(load_sim_config("", {"sim.collective_model=nccl", "sim.device=h100-sxm",
                                                     "sim.nccl_max_bus_gbps=2800", "sim.nccl_protocols=simple",
                                                     "sim.collective_padding=dummy", "sim.fsdp_root_unit=true"}),
                                "");
  CHECK(h100.link.nccl.max_bus_bandwidth == Approx(350e9));
  CHECK((!h100.link.nccl.ll && !h100.link.nccl.ll128 && h100.link.nccl.simple));
  CHECK(h100.dummy_padding);
  CHECK(h100.fsdp_root_unit);
  CHECK(!a100.fsdp_root_unit);
  CHECK(build_setup(load_sim_config("", {}), "").link.collective == CollectiveModel::bandwidth);
  CHECK_THROWS_WITH(build_setup(load_sim_config("", {"sim.collective_model=nccl", "sim.nccl_protocols=ll,fast"}), ""),
                    Contains("sim.nccl_protocols") && Contains("fast"));
  CHECK_THROWS_WITH(build_setup(load_sim_config("", {"sim.collective_model=nccl", "sim.device=calibrated",
                                                     "sim.calibration=/nonexistent/t.json"}),
                                ""),
                    Contains("sim.collective_model = nccl") && Contains("calibrated"));
  CHECK_THROWS_AS(load_sim_config("", {"sim.collective_padding=zeros"}), odc::Error);
}

TEST_CASE("collective padding: a dummy microbatch costs its steps' fixed time, idle in the bubble", "[sim]") {
  // One decoder layer; every step has a fixed cost c0 and a cost per token.
  ComputeModel compute = ComputeModel::uniform(1, 1e-3);
  const double c0 = 0.01;
  for (auto& step : compute.forward) step.c0 = c0;
  for (auto& step : compute.backward) step.c0 = c0;
  compute.head.c0 = c0;
  const auto steps = compute.steps().size();  // F0 F1 H B1 B0
  UnitBytes bytes;
  bytes.gather.assign(static_cast<std::size_t>(compute.num_units()), 0.0);
  bytes.reduce = bytes.gather;
  // Device 0 runs two microbatches of 100 tokens, device 1 one: it pads the second step.
  const std::vector<DeviceWork> work = {{{100, 0.0, 1}, {100, 0.0, 1}}, {{100, 0.0, 1}}};
  ScheduleOptions empty;
  ScheduleOptions dummy;
  dummy.dummy_padding = true;
  const auto a = simulate_minibatch(work, compute, bytes, LinkModel::free(2), CommKind::collective, empty);
  const auto b = simulate_minibatch(work, compute, bytes, LinkModel::free(2), CommKind::collective, dummy);
  const double one_token_microbatch = compute.microbatch_time(1, 1.0);
  CHECK(one_token_microbatch == Approx(static_cast<double>(steps) * (c0 + 1e-3)));
  CHECK(a.devices[1].padding_s == 0.0);
  CHECK(b.devices[1].padding_s == Approx(one_token_microbatch));
  CHECK(b.devices[0].padding_s == 0.0);
  // Useful compute is the same; the dummy is busy time the bubble counts as idle.
  CHECK(b.devices[1].compute_s == Approx(a.devices[1].compute_s));
  CHECK(b.bubble() == Approx(a.bubble()));
  // The dummy is shorter than device 0's second microbatch, so the per-step barrier hides it.
  CHECK(b.barrier_s == Approx(a.barrier_s));
  // ODC never pads: each device runs its own count.
  const auto odc = simulate_minibatch(work, compute, bytes, LinkModel::free(2), CommKind::odc, dummy);
  CHECK(odc.devices[1].padding_s == 0.0);
  CHECK(odc.devices[1].microbatches == 1);
}

TEST_CASE("NCCL ring all-reduce: twice the steps, the ring plateau across nodes, hybrid's replica sum", "[sim][nccl]") {
  const NcclRing ring;
  const double shard = 3.8e9;  // a 7B fp32 gradient's 1/8
  // 2 ranks on 2 nodes: 2 steps, both over the network; Simple's latency x 1.9 for a large message.
  const auto t = nccl_ring_time(ring, 2, 1, 12.5e9, shard, NcclCollective::all_reduce);
  CHECK(t.protocol == NcclProtocol::simple);
  CHECK(t.latency == Approx((8.4 + 2 * 9.6) * 1.9e-6));
  CHECK(t.seconds == Approx(t.latency + 2.0 * shard * 1.0 / 2.0 / 12.5e9));
  // In one node: 2(D-1) NVLink steps, algorithm bandwidth bus * D / (2(D-1)), no plateau.
  const auto node = nccl_ring_time(ring, 8, 8, 300e9, 1e9, NcclCollective::all_reduce);
  CHECK(node.latency == Approx((8.4 + 14 * 3.4) * 1e-6));
  CHECK(node.seconds == Approx(node.latency + 1e9 * 2.0 * 7.0 / 8.0 / 235e9));
  // LL all-reduce: a quarter of the bus bandwidth even in one node.
  CHECK(nccl_ring_time(NcclRing::with_protocols("ll", "k"), 8, 8, 300e9, 4096.0, NcclCollective::all_reduce)
            .bus_bandwidth == Approx(235e9 / 4.0));
  // Hybrid sharding's cross-node sum: the nccl model gives NCCL's all-reduce over one rank per node
  // at the device's share of the node's link.
  LinkModel link = test::a100_nodes(16, 20e-6);
  const double bandwidth_model = replica_all_reduce_time(link, shard);
  CHECK(bandwidth_model == Approx(20e-6 + shard / 12.5e9));
  link.collective = CollectiveModel::nccl;
  CHECK(replica_all_reduce_time(link, shard) ==
        Approx(nccl_ring_time(link.nccl, 2, 1, 12.5e9, shard, NcclCollective::all_reduce).seconds));
}
