// The collective comm over MPI allocates what its choice plans (comm_buffers.h: planned_buffers,
// the memory plan's items): the reduce-scatter receive buffers exactly, the unit buffers within a
// decoder layer of the plan once every unit was gathered and pushed (the threads' cases, ODC over
// ipc and ucx: tests/unit/distributed/comm/test_comm_buffers.cpp).
#include <catch2/catch.hpp>

#include "mpi_test_support.h"
#include "odc/distributed/comm/comm_buffers.h"
#include "odc/distributed/comm/comm_factory.h"
#include "odc/model/units.h"
#include "unit/distributed/comm/comm_buffers_support.h"

using namespace odc;

TEST_CASE("comm buffers: the collective comm allocates what its choice plans", "[mpi]") {
  const auto group = test::world_group();
  model::LlamaConfig config;
  config.vocab_size = 4096;  // the embedding and the head ~10x a decoder layer, as in real models
  config.hidden_size = 32;
  config.intermediate_size = 64;
  config.num_hidden_layers = 2;
  config.num_attention_heads = 2;
  config.num_key_value_heads = 1;
  config.head_dim = 16;
  const auto units = model::build_unit_layouts(config);
  const distributed::ShardLayout layout(units, group->size(), group->rank());
  distributed::CommOptions options;
  options.kind = distributed::CommKind::collective;
  auto stack = distributed::make_comm(options, *group, layout, units, config, 3);
  auto& comm = stack->comm();
  const int n = layout.num_units();
  test::one_minibatch(comm, n);
  const auto choice = distributed::choose_comm(
      distributed::comm_facts(options, group->size(), "", group->over_mpi(), distributed::comm_hosts(*group)));
  const auto planned = distributed::planned_buffers(choice, options, distributed::comm_shape(layout), false, 1);
  const auto allocated = comm.allocated();
  if (group->size() == 1) {
    CHECK(planned.items.empty());
    CHECK(allocated.items.empty());
    return;
  }
  REQUIRE(choice.build == distributed::CommBuild::mpi_collective);
  REQUIRE(allocated.find("reduce-scatter receive buffers") != nullptr);
  CHECK(allocated.find("reduce-scatter receive buffers")->bytes == planned.find("reduce-scatter receive buffers")->bytes);
  const std::int64_t layer = test::largest_layer(layout);
  const std::int64_t unit_buffers = allocated.find("unit buffers")->bytes;
  CHECK(unit_buffers <= planned.find("unit buffers")->bytes);
  CHECK(unit_buffers >= planned.find("unit buffers")->bytes - 4 * layer);
  CHECK(allocated.items.size() == 2);
}
