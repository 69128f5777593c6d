// make_comm: the comm a run gets, and the policy answers the trainer relies on.
#include <catch2/catch.hpp>

#include "odc/distributed/comm/comm_factory.h"
#include "odc/distributed/group/in_process_group.h"
#include "odc/model/units.h"
#include "unit/tiny_model.h"

using namespace odc;
using distributed::CommKind;

namespace {
distributed::CommOptions options_of(CommKind kind, distributed::TransportKind transport = distributed::TransportKind::automatic) {
  distributed::CommOptions o;
  o.kind = kind;
  o.odc_transport = transport;
  return o;
}
}  // namespace


TEST_CASE("comm kinds: names, and which schedules need equal microbatch counts", "[distributed]") {
  CHECK(distributed::parse_comm_kind("odc") == CommKind::odc);
  CHECK(distributed::comm_kind_name(distributed::parse_comm_kind("collective")) == "collective");
  CHECK_THROWS_WITH(distributed::parse_comm_kind("nccl"), Catch::Contains("unknown comm 'nccl'"));
  CHECK(distributed::needs_equal_microbatches(CommKind::collective, 2));
  CHECK_FALSE(distributed::needs_equal_microbatches(CommKind::collective, 1));
  CHECK_FALSE(distributed::needs_equal_microbatches(CommKind::odc, 4));
}

TEST_CASE("make_comm: one rank gets the local comm over the whole model, initialized from the seed", "[distributed]") {
  const auto config = test::tiny_model();
  const auto units = model::build_unit_layouts(config);
  auto group = distributed::InProcessGroup::create(1);
  for (const auto kind : {CommKind::odc, CommKind::collective}) {
    const distributed::ShardLayout layout(units, 1, 0);
    auto stack = distributed::make_comm(options_of(kind), *group[0], layout, units, config, 5);
    CHECK(stack->comm().name() == "local");
    CHECK_FALSE(stack->comm().needs_equal_microbatches());
    CHECK(stack->comm().resources().endpoints == 0);
    // The local comm hands out the masters themselves: no copy.
    CHECK(stack->comm().acquire(1) == stack->store().master(1));
    const distributed::ShardStore reference(layout, units, config, 5);
    for (int u = 0; u < layout.num_units(); ++u) {
      for (std::int64_t i = 0; i < layout.unit(u).shard; ++i) REQUIRE(stack->store().master(u)[i] == reference.master(u)[i]);
    }
  }
}

TEST_CASE("make_comm: host collectives need an MPI group, and the layout must match the group", "[distributed]") {
  const auto config = test::tiny_model();
  const auto units = model::build_unit_layouts(config);
  auto group = distributed::InProcessGroup::create(2);
  const distributed::ShardLayout layout(units, 2, 0);
  // ODC over UCX runs over any group (tests/unit/distributed/comm/test_odc_protocol.cpp runs it over threads).
  CHECK_THROWS_WITH(distributed::make_comm(options_of(CommKind::collective), *group[0], layout, units, config, 0),
                    Catch::Contains("the collective comm on host memory runs over MPI"));
  const distributed::ShardLayout wrong(units, 2, 1);
  CHECK_THROWS_WITH(distributed::make_comm(options_of(CommKind::collective), *group[0], wrong, units, config, 0),
                    Catch::Contains("shard layout is for rank 1 of 2, but the group has rank 0 of 2"));
  CHECK(distributed::parse_odc_transport("auto") == distributed::TransportKind::automatic);
  CHECK_THROWS_WITH(distributed::parse_odc_transport("tcp"), Catch::Contains("unknown comm.transport 'tcp'"));
  CHECK(distributed::parse_gather_dtype("bf16") == distributed::GatherDtype::bf16);
  CHECK_THROWS_WITH(distributed::parse_gather_dtype("fp16"), Catch::Contains("unknown comm.gather_dtype 'fp16'"));
}
