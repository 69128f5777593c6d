// The buffers a comm's choice plans (comm_buffers.h: planned_buffers, what the memory plan lists)
// against what the comm make_comm builds for it reports it allocated (Comm::allocated), ranks as
// threads of one process: the local comm, ODC over ipc (host shared memory) and over ucx. The
// unit buffers grow as the model asks: after a minibatch over every unit, within one decoder
// layer of the plan (test_unit_buffer_pool.cpp). The collective over MPI: tests/mpi.
#include <catch2/catch.hpp>

#include "odc/distributed/comm/comm_buffers.h"
#include "odc/distributed/comm/comm_factory.h"
#include "odc/model/units.h"
#include "unit/distributed/comm/comm_buffers_support.h"
#include "unit/rank_threads.h"
#include "unit/tiny_model.h"

using namespace odc;

namespace {

distributed::CommOptions odc_options(distributed::TransportKind transport, bool deterministic,
                                     distributed::GatherDtype gather) {
  distributed::CommOptions o;
  o.kind = distributed::CommKind::odc;
  o.odc_transport = transport;
  o.gather_dtype = gather;
  o.deterministic = deterministic;
  o.transport.chunk_bytes = 4096;
  o.transport.max_inflight = 3;
  o.transport.timeout_s = 20;
  return o;
}

// "" when every allocation the plan names is what was allocated (the unit buffers: within a layer).
std::string compare(const PlannedMemory& planned, const PlannedMemory& allocated, std::int64_t layer_bytes) {
  std::string report;
  for (const auto& item : planned.items) {
    if (item.name.find("(estimate)") != std::string::npos || item.name == "peers' regions mapped here") continue;
    const PlannedBytes* got = allocated.find(item.name);
    const std::int64_t bytes = got != nullptr ? got->bytes : 0;
    const bool ok = item.name == "unit buffers" ? bytes <= item.bytes && bytes >= item.bytes - layer_bytes
                                                : bytes == item.bytes;
    if (!ok) report += item.name + ": planned " + std::to_string(item.bytes) + ", allocated " + std::to_string(bytes) + "; ";
  }
  for (const auto& item : allocated.items) {
    if (planned.find(item.name) == nullptr) report += item.name + " allocated, not planned; ";
  }
  return report;
}

}  // namespace

TEST_CASE("comm buffers: one rank's local comm plans and allocates nothing of its own", "[distributed][memory]") {
  const auto config = test::tiny_model();
  const auto units = model::build_unit_layouts(config);
  auto group = distributed::InProcessGroup::create(1);
  const distributed::ShardLayout layout(units, 1, 0);
  const auto options = odc_options(distributed::TransportKind::automatic, false, distributed::GatherDtype::f32);
  auto stack = distributed::make_comm(options, *group[0], layout, units, config, 5);
  const auto choice = distributed::choose_comm(distributed::comm_facts(options, 1, "", false, 1));
  CHECK(choice.build == distributed::CommBuild::local);
  CHECK(distributed::planned_buffers(choice, options, distributed::comm_shape(layout), false, 1).items.empty());
  CHECK(stack->comm().allocated().items.empty());
}

TEST_CASE("comm buffers: ODC over ipc and ucx allocates what its choice plans", "[distributed][memory][ipc][ucx]") {
  // The embedding and the head ~10x a decoder layer, as in real models (the unit buffers' plan:
  // one buffer of each kind at the largest unit, the others at a layer).
  model::LlamaConfig config = test::tiny_model(3);
  config.vocab_size = 4096;
  config.hidden_size = 32;
  config.intermediate_size = 64;
  config.head_dim = 16;
  const auto units = model::build_unit_layouts(config);
  struct Case {
    distributed::TransportKind transport;
    bool deterministic;
    distributed::GatherDtype gather;
  };
  // UCX with comm.deterministic: the PushAccumulator's own per-client buffers, world x owned floats.
  const Case cases[] = {{distributed::TransportKind::ipc, false, distributed::GatherDtype::f32},
                        {distributed::TransportKind::ipc, true, distributed::GatherDtype::bf16},
                        {distributed::TransportKind::ucx, false, distributed::GatherDtype::f32},
                        {distributed::TransportKind::ucx, true, distributed::GatherDtype::f32}};
  for (const auto& c : cases) {
    for (const int world : {2, 3}) {
      DYNAMIC_SECTION((c.transport == distributed::TransportKind::ucx ? "ucx" : "ipc")
                      << (c.deterministic ? ", deterministic" : "")
                      << (c.gather == distributed::GatherDtype::bf16 ? ", bf16 gathers" : "") << ", world " << world) {
        std::vector<std::string> seen(static_cast<std::size_t>(world));
        const auto errors = test::on_every_rank(world, [&](distributed::HostGroup& group) {
          const distributed::ShardLayout layout(units, world, group.rank());
          const auto options = odc_options(c.transport, c.deterministic, c.gather);
          auto stack = distributed::make_comm(options, group, layout, units, config, 7);
          test::one_minibatch(stack->comm(), layout.num_units());
          const auto choice = distributed::choose_comm(
              distributed::comm_facts(options, world, "", group.over_mpi(), distributed::comm_hosts(group)));
          const auto planned =
              distributed::planned_buffers(choice, options, distributed::comm_shape(layout), false, world);
          seen[static_cast<std::size_t>(group.rank())] =
              compare(planned, stack->comm().allocated(), 4 * test::largest_layer(layout));
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
