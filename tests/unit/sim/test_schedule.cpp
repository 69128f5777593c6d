// Schedule model with known answers: balanced work has no bubble, a straggler gives the closed
// form (D-1)(k-1)/(Dk) under both comms, opposite microbatch orders separate collective
// (sum_m max_d, exactly without prefetch) from ODC (max_d sum_m), gathers shorter than compute
// are hidden, and with a compute model proportional to the planner's cost the simulated bubbles
// equal the planned ones.
#include <catch2/catch.hpp>
#include <cstdint>
#include <numeric>
#include <vector>

#include "odc/core/error.h"
#include "odc/data/planner.h"
#include "odc/sim/schedule.h"
#include "unit/sim/sim_links.h"

using namespace odc::sim;

namespace {

// 0 decoder layers: steps are embedding forward, head, embedding backward (3 per microbatch).
// One microbatch of `tokens` then takes 3 * seconds_per_token * tokens.
ComputeModel three_step_model(double seconds_per_microbatch_token) {
  return ComputeModel::uniform(0, seconds_per_microbatch_token / 3.0);
}

UnitBytes bytes_for(const ComputeModel& compute, double bytes) {
  UnitBytes out;
  out.gather.assign(static_cast<std::size_t>(compute.num_units()), bytes);
  out.reduce.assign(static_cast<std::size_t>(compute.num_units()), bytes);
  return out;
}

DeviceWork microbatches(const std::vector<std::int64_t>& tokens) {
  DeviceWork work;
  for (const auto t : tokens) work.push_back({t, 0.0, 1});
  return work;
}

}  // namespace

TEST_CASE("balanced work has no bubble under either comm", "[sim]") {
  const auto compute = ComputeModel::uniform(4, 1e-4, 0.5);
  const auto bytes = bytes_for(compute, 1e6);
  const std::vector<DeviceWork> work(4, microbatches({1000, 3000, 2000}));
  for (const auto comm : {CommKind::collective, CommKind::odc}) {
    const auto timeline = simulate_minibatch(work, compute, bytes, LinkModel::free(4), comm);
    const double expected = compute.microbatch_time(6000, 0.0);
    CHECK(timeline.barrier_s == Approx(expected));
    CHECK(timeline.bubble() == Approx(0.0).margin(1e-12));
    CHECK(timeline.total_s() == Approx(expected + 0.5));
    for (const auto& device : timeline.devices) {
      CHECK(device.compute_s == Approx(expected));
      CHECK(device.microbatches == 3);
      CHECK(device.busy.size() == 3 * compute.steps().size());
    }
  }
}

TEST_CASE("one straggler gives the closed-form bubble (D-1)(k-1)/(Dk)", "[sim]") {
  const int devices = 5;
  const int microbatch_count = 4;
  const std::int64_t k = 3;
  const auto compute = ComputeModel::uniform(2, 1e-4);
  const auto bytes = bytes_for(compute, 1e6);
  std::vector<DeviceWork> work(devices, microbatches(std::vector<std::int64_t>(microbatch_count, 1000)));
  work[0] = microbatches(std::vector<std::int64_t>(microbatch_count, 1000 * k));
  const double expected = (devices - 1.0) * (k - 1.0) / (devices * static_cast<double>(k));
  for (const auto comm : {CommKind::collective, CommKind::odc}) {
    const auto timeline = simulate_minibatch(work, compute, bytes, LinkModel::free(devices), comm);
    CHECK(timeline.bubble() == Approx(expected));
    CHECK(timeline.barrier_s == Approx(compute.microbatch_time(1000 * k, 0.0) * microbatch_count));
  }
}

TEST_CASE("opposite microbatch orders: collective pays sum_m max_d, ODC max_d sum_m", "[sim]") {
  // d0 runs microbatches costing [2, 1] seconds, d1 [1, 2]; 3 steps per microbatch.
  const auto compute = three_step_model(1e-3);
  const auto bytes = bytes_for(compute, 1e6);
  const std::vector<DeviceWork> work = {microbatches({2000, 1000}), microbatches({1000, 2000})};
  SECTION("without prefetch every step is a barrier: the paper's Eq. 1") {
    ScheduleOptions options;
    options.prefetch_depth = 0;
    const auto collective = simulate_minibatch(work, compute, bytes, LinkModel::free(2), CommKind::collective, options);
    const auto odc = simulate_minibatch(work, compute, bytes, LinkModel::free(2), CommKind::odc, options);
    CHECK(collective.barrier_s == Approx(4.0));
    CHECK(odc.barrier_s == Approx(3.0));
    CHECK(collective.bubble() == Approx(0.25));  // each device idles 1 s of 4
    CHECK(odc.bubble() == Approx(0.0).margin(1e-12));
    // Under the collective each device waits at the steps where the other one is slower; d0's
    // last wait is its final reduce-scatter, which completes only once d1 joins it at 4 s.
    CHECK(collective.devices[0].gather_wait_s == Approx(2.0 / 3.0));
    CHECK(collective.devices[0].finish_s == Approx(4.0));
    CHECK(collective.devices[1].gather_wait_s == Approx(1.0));
    CHECK(odc.devices[0].gather_wait_s == Approx(0.0).margin(1e-12));
  }
  SECTION("with prefetch depth 1 a device may run one step ahead") {
    // An all-gather completes once every device started the step before; d1 (fast in
    // microbatch 0) starts microbatch 1 one step early and ends at 3 + 1/3.
    const auto collective = simulate_minibatch(work, compute, bytes, LinkModel::free(2), CommKind::collective);
    const auto odc = simulate_minibatch(work, compute, bytes, LinkModel::free(2), CommKind::odc);
    CHECK(collective.barrier_s == Approx(10.0 / 3.0));
    CHECK(odc.barrier_s == Approx(3.0));
    CHECK(collective.bubble() == Approx(0.1));
    CHECK(collective.devices[0].gather_wait_s == Approx(0.0).margin(1e-12));
    CHECK(collective.devices[1].gather_wait_s == Approx(1.0 / 3.0));
  }
}

TEST_CASE("ODC hides gathers shorter than a step's compute", "[sim]") {
  // 2 devices on one node: a gather or push of B bytes moves B/2 in B/2 / bandwidth seconds.
  const auto compute = three_step_model(3e-3);  // 1000 tokens: 1 s per step
  LinkModel link;
  link.devices = 2;
  link.devices_per_node = 2;
  link.intra_bandwidth = 1e6;  // 0.5 MB in 0.5 s
  const auto bytes = bytes_for(compute, 1e6);
  REQUIRE(link.transfer_time(CommKind::odc, 1e6) == Approx(0.5));
  const std::vector<DeviceWork> work(2, microbatches({1000, 1000, 1000}));
  const auto timeline = simulate_minibatch(work, compute, bytes, link, CommKind::odc);
  const double computing = 9.0;  // 3 microbatches x 3 steps x 1 s
  for (const auto& device : timeline.devices) {
    // Only the minibatch's first gather is exposed; the last push drains after the last step.
    CHECK(device.gather_wait_s == Approx(0.5));
    CHECK(device.push_wait_s == Approx(0.0).margin(1e-12));
    CHECK(device.compute_s == Approx(computing));
    CHECK(device.finish_s == Approx(0.5 + computing + 0.5));
  }

  SECTION("gathers longer than compute are exposed at every step") {
    link.intra_bandwidth = 0.25e6;  // 2 s per gather: each step waits 1 s beyond its prefetch
    const auto slow = simulate_minibatch(work, compute, bytes, link, CommKind::odc);
    // First gather 2 s, then every later step's gather (issued at the previous step's start)
    // arrives 1 s after that step ends: 8 more waits of 1 s.
    CHECK(slow.devices[0].gather_wait_s == Approx(2.0 + 8.0));
  }
  SECTION("the collective all-gather is hidden the same way when devices are balanced") {
    const auto collective = simulate_minibatch(work, compute, bytes, link, CommKind::collective);
    CHECK(collective.devices[0].gather_wait_s == Approx(0.5));
    CHECK(collective.barrier_s == Approx(timeline.barrier_s));
  }
}

TEST_CASE("reductions beyond the in-flight limit stall backward", "[sim]") {
  // Pushes take 4 s, steps 1 s; gradients come from the head and backward steps.
  const auto compute = ComputeModel::uniform(3, 1e-3);  // 1000 tokens: 1 s per step, 9 steps
  LinkModel link;
  link.devices = 2;
  link.devices_per_node = 2;
  link.intra_bandwidth = 1e6;
  UnitBytes bytes = bytes_for(compute, 0.0);
  bytes.reduce.assign(bytes.reduce.size(), 8e6);  // 4 s per push
  const std::vector<DeviceWork> work(2, microbatches({1000}));
  ScheduleOptions options;
  options.max_outstanding_reductions = 1;
  const auto timeline = simulate_minibatch(work, compute, bytes, link, CommKind::odc, options);
  // 5 hand-offs (head + 4 backward) one at a time: pushes run back to back from t = 5 s (the
  // head ends), each next step waits for the previous push: the last push ends at 5 + 5*4 = 25.
  CHECK(timeline.devices[0].finish_s == Approx(25.0));
  CHECK(timeline.devices[0].push_wait_s == Approx(4 * 3.0));
}

TEST_CASE("collective pads missing microbatches and ODC skips empty ones", "[sim]") {
  const auto compute = three_step_model(1e-3);
  const auto bytes = bytes_for(compute, 1e6);
  const std::vector<DeviceWork> work = {microbatches({1000, 1000, 1000}), microbatches({3000})};
  ScheduleOptions no_prefetch;
  no_prefetch.prefetch_depth = 0;
  const auto collective =
      simulate_minibatch(work, compute, bytes, LinkModel::free(2), CommKind::collective, no_prefetch);
  const auto odc = simulate_minibatch(work, compute, bytes, LinkModel::free(2), CommKind::odc);
  CHECK(collective.devices[1].microbatches == 3);
  CHECK(odc.devices[1].microbatches == 1);
  CHECK(collective.barrier_s == Approx(3.0 + 1.0 + 1.0));  // max of (1, 3), then (1, 0) twice
  CHECK(odc.barrier_s == Approx(3.0));
  CHECK(odc.bubble() == Approx(0.0).margin(1e-12));
}

TEST_CASE("with compute proportional to the planner's cost, simulated bubbles equal planned ones", "[sim]") {
  // Linear cost = tokens; every step's time is proportional to tokens, so per-step barriers cost
  // exactly what per-microbatch barriers do.
  std::vector<std::int64_t> lengths;
  std::uint64_t state = 7;
  for (int i = 0; i < 48; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    lengths.push_back(64 + static_cast<std::int64_t>((state >> 33) % 4000));
  }
  const auto compute = ComputeModel::uniform(2, 1e-5);
  const auto bytes = bytes_for(compute, 1e6);
  for (const auto balance : {odc::data::Balance::local_sort, odc::data::Balance::lb_micro, odc::data::Balance::lb_mini}) {
    odc::data::PlanInput input;
    input.lengths = lengths;
    input.world_size = 6;
    input.token_cap = 6000;
    input.cost = odc::data::CostModel::linear();
    input.balance = balance;
    const auto plan = odc::data::make_plan(input);
    const auto work = work_from_plan(plan, lengths);
    std::int64_t tokens = 0;
    for (const auto& device : work) {
      for (const auto& mb : device) tokens += mb.tokens;
    }
    CHECK(tokens == std::accumulate(lengths.begin(), lengths.end(), std::int64_t{0}));
    const auto odc_timeline = simulate_minibatch(work, compute, bytes, LinkModel::free(6), CommKind::odc);
    CHECK(odc_timeline.bubble() == Approx(plan.bubble_odc()).margin(1e-9));
    if (balance != odc::data::Balance::lb_mini) {
      ScheduleOptions no_prefetch;
      no_prefetch.prefetch_depth = 0;
      const auto coll =
          simulate_minibatch(work, compute, bytes, LinkModel::free(6), CommKind::collective, no_prefetch);
      CHECK(coll.bubble() == Approx(plan.bubble_collective()).margin(1e-9));
      // Prefetch lets devices run one step ahead: never slower, never faster than ODC.
      const auto prefetched = simulate_minibatch(work, compute, bytes, LinkModel::free(6), CommKind::collective);
      CHECK(prefetched.barrier_s <= coll.barrier_s + 1e-12);
      CHECK(prefetched.barrier_s >= odc_timeline.barrier_s - 1e-12);
    }
  }
}

TEST_CASE("causal pairs and work from a plan", "[sim]") {
  CHECK(causal_pairs(1) == 1.0);
  CHECK(causal_pairs(4) == 10.0);
  odc::data::Plan plan;
  plan.ranks.resize(1);
  plan.ranks[0].microbatches = {{0, 2}, {1}};
  const auto work = work_from_plan(plan, {3, 5, 4});
  REQUIRE(work.size() == 1);
  REQUIRE(work[0].size() == 2);
  CHECK(work[0][0].tokens == 7);
  CHECK(work[0][0].pairs == 6.0 + 10.0);
  CHECK(work[0][0].sequences == 2);
  CHECK(work[0][1].tokens == 5);
  plan.ranks[0].microbatches = {{3}};
  CHECK_THROWS_AS(work_from_plan(plan, {3, 5, 4}), odc::Error);
}

TEST_CASE("collective_compute_factor stretches Collective's compute only", "[sim]") {
  const auto compute = ComputeModel::uniform(4, 1e-4, 0.5);
  const auto bytes = bytes_for(compute, 1e6);
  const std::vector<DeviceWork> work(2, microbatches({1000, 3000}));
  ScheduleOptions options;
  options.collective_compute_factor = 1.25;
  const double plain = compute.microbatch_time(4000, 0.0);
  const auto collective = simulate_minibatch(work, compute, bytes, LinkModel::free(2), CommKind::collective, options);
  const auto odc = simulate_minibatch(work, compute, bytes, LinkModel::free(2), CommKind::odc, options);
  CHECK(collective.barrier_s == Approx(1.25 * plain));
  CHECK(odc.barrier_s == Approx(plain));
  for (const auto& device : collective.devices) CHECK(device.compute_s == Approx(1.25 * plain));
  options.collective_compute_factor = 0.0;
  CHECK_THROWS_AS(simulate_minibatch(work, compute, bytes, LinkModel::free(2), CommKind::collective, options),
                  odc::Error);
}

TEST_CASE("two nodes: a shared link serializes gathers and pushes, independent channels overlap them", "[sim]") {
  // 2 devices on 2 nodes, no compute, no prefetch: the steps are F0, H1, B0 (embedding, head).
  // Each transfer moves half its unit across the node link: latency + (bytes / 2) / bandwidth.
  LinkModel link;
  link.devices = 2;
  link.devices_per_node = 1;
  link.intra_bandwidth = 1e12;
  link.inter_bandwidth = 1e9;
  link.latency = 1e-3;
  const auto compute = ComputeModel::uniform(0, 0.0);
  UnitBytes bytes;
  bytes.gather = {2e6, 4e6};  // unit 0, unit 1 (head)
  bytes.reduce = {6e6, 8e6};
  auto t = [&](double b) { return 1e-3 + b / 2 / 1e9; };
  REQUIRE(link.transfer_time(CommKind::odc, 2e6) == Approx(t(2e6)));
  const std::vector<DeviceWork> work(2, microbatches({1000}));
  ScheduleOptions options;
  options.prefetch_depth = 0;
  // Independent: gathers F0, H1, B0 back to back; H1's push (8 MB) runs beside B0's gather, then
  // B0's push follows it on the push channel.
  const double g0 = t(2e6), g1 = t(4e6), r1 = t(8e6), r0 = t(6e6);
  const double independent = std::max(g0 + g1 + g0, g0 + g1 + r1) + r0;
  const auto apart = simulate_minibatch(work, compute, bytes, link, CommKind::odc, options);
  CHECK(apart.devices[0].finish_s == Approx(independent));
  // Shared: every transfer queues on the one link: the sum.
  options.shared_link = true;
  const auto shared = simulate_minibatch(work, compute, bytes, link, CommKind::odc, options);
  CHECK(shared.devices[0].finish_s == Approx(g0 + g1 + r1 + g0 + r0));
  CHECK(shared.barrier_s == Approx(g0 + g1 + r1 + g0 + r0 + link.latency));
  // The collective's all-gathers and reduce-scatters share the ring the same way (a ring moves
  // bytes * (D-1)/D through the node link: the same half here).
  const auto ring = simulate_minibatch(work, compute, bytes, link, CommKind::collective, options);
  CHECK(ring.devices[0].finish_s == Approx(g0 + g1 + r1 + g0 + r0));
  options.shared_link = false;
  CHECK(simulate_minibatch(work, compute, bytes, link, CommKind::collective, options).devices[0].finish_s ==
        Approx(independent));
}

TEST_CASE("owners pay for accumulating every client's pushes", "[sim]") {
  // Free links, two devices, one microbatch each (the second twice as long): every push delivers
  // reduce[u] / 2 bytes to each owner, so each owner adds sum_u reduce[u] bytes per microbatch of
  // each client: 2 clients x (1e6 + 3e6) / 2 x k seconds.
  const auto compute = three_step_model(1e-3);  // 1000 tokens: 1 s per microbatch
  UnitBytes bytes;
  bytes.gather = {1e6, 1e6};
  bytes.reduce = {1e6, 3e6};
  const std::vector<DeviceWork> work = {microbatches({1000}), microbatches({2000})};
  ScheduleOptions options;
  options.accumulate_seconds_per_byte = 1e-7;
  const auto timeline = simulate_minibatch(work, compute, bytes, LinkModel::free(2), CommKind::odc, options);
  const double total = 2 * (1e6 + 3e6) / 2 * 1e-7;  // 0.4 s
  // The slow device: every push arrives while it computes (or as it finishes): its finish moves
  // by the whole accumulation.
  CHECK(timeline.devices[1].accumulate_s == Approx(total));
  CHECK(timeline.devices[1].finish_s == Approx(2.0 + total));
  // The fast one finished at 1 s (+ the adds of its own and the other's first pushes); the slow
  // device's last pushes arrive later and run in its idle time, so it still ends first.
  CHECK(timeline.devices[0].finish_s < timeline.devices[1].finish_s);
  CHECK(timeline.barrier_s == Approx(2.0 + total));
  CHECK(timeline.devices[1].compute_s == Approx(2.0));  // compute itself is unchanged
  // Collectives reduce inside the collective: no owner-side term.
  const auto collective = simulate_minibatch(work, compute, bytes, LinkModel::free(2), CommKind::collective, options);
  CHECK(collective.barrier_s == Approx(2.0));
}

TEST_CASE("FSDP's root unit: the embedding and head gathered once per microbatch, handed off once", "[sim]") {
  // 2 nodes of 8 (bandwidth model); 2 decoder layers; every device one microbatch.
  const LinkModel link = test::a100_nodes(16);
  const auto compute = ComputeModel::uniform(2, 1e-6);
  UnitBytes bytes;
  bytes.gather = {4e8, 1e8, 1e8, 5e8};  // embedding, 2 layers, head
  bytes.reduce = {8e8, 2e8, 2e8, 1e9};
  bytes.root_gather = 9e8;
  bytes.root_reduce = 1.8e9;
  const std::vector<DeviceWork> work(16, microbatches({4000}));
  ScheduleOptions per_unit;
  per_unit.shared_link = true;
  ScheduleOptions root = per_unit;
  root.fsdp_root_unit = true;
  for (const auto comm : {CommKind::collective, CommKind::odc}) {
    const auto a = simulate_minibatch(work, compute, bytes, link, comm, per_unit);
    const auto b = simulate_minibatch(work, compute, bytes, link, comm, root);
    // Per unit: the embedding is gathered at its forward and again at its backward; the root keeps
    // it, so one embedding gather fewer crosses the nodes; the hand-offs move the same bytes.
    CHECK(b.inter_node_bytes ==
          Approx(a.inter_node_bytes - (comm == CommKind::odc ? 16.0 : 1.0) * link.inter_node_bytes(comm, 4e8)));
    // The same compute either way.
    CHECK(b.devices[0].compute_s == Approx(a.devices[0].compute_s));
  }
  // The schedule's transfers, step by step: the root's gather at the embedding's forward, none at the
  // head or the embedding's backward; its hand-off after the embedding's backward only.
  const auto costs = layout_costs(bytes, link, CommKind::collective, Sharding::full, true);
  CHECK(costs.gather_of({0, Phase::forward}).seconds == Approx(link.transfer_time(CommKind::collective, 9e8)));
  CHECK(!costs.gather_of({3, Phase::head}).happens);
  CHECK(!costs.gather_of({0, Phase::backward}).happens);
  CHECK(costs.gather_of({1, Phase::backward}).happens);
  CHECK(!costs.hand_off_of({3, Phase::head}).happens);
  CHECK(costs.hand_off_of({0, Phase::backward}).bytes == Approx(1.8e9));
  CHECK(!costs.hand_off_of({1, Phase::forward}).happens);
  const auto plain = layout_costs(bytes, link, CommKind::collective, Sharding::full, false);
  CHECK(plain.gather_of({0, Phase::backward}).happens);
  CHECK(plain.hand_off_of({3, Phase::head}).bytes == Approx(1e9));
}
