// ResidentWeights: it starts from the weights every trainer starts from, trains to the same bits
// as the one-rank trainer path (LocalComm over a ShardStore), accumulates gradients until told to
// zero them, counts each unit's hand-offs, and refuses buffers that do not fit the layout.
#include <algorithm>
#include <cstdint>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "odc/backend/cpu_backend.h"
#include "odc/core/error.h"
#include "odc/distributed/comm/local_comm.h"
#include "odc/distributed/shard/shard_layout.h"
#include "odc/distributed/shard/shard_store.h"
#include "odc/model/llama_model.h"
#include "support/resident_weights.h"

using namespace odc;

namespace {

model::LlamaConfig tiny_config(bool tied) {
  nlohmann::json j = {{"vocab_size", 29},       {"hidden_size", 16},        {"intermediate_size", 24},
                      {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                      {"tie_word_embeddings", tied}};
  return model::LlamaConfig::from_json(j, "test", true);
}

model::PackedBatch batch_of(std::int64_t vocab) {
  model::PackedBatch batch;
  for (const std::int32_t length : {11, 6}) {
    std::vector<std::int32_t> tokens;
    for (std::int32_t i = 0; i < length; ++i) tokens.push_back(static_cast<std::int32_t>((7 * i + length) % vocab));
    batch.append(tokens.data(), nullptr, length, 0.05f);
  }
  return batch;
}

std::vector<float> copy_of(std::span<const float> values) { return {values.begin(), values.end()}; }

}  // namespace

TEST_CASE("resident weights start from the trainer's initialization with zero gradients", "[model]") {
  const auto config = tiny_config(false);
  const auto units = model::build_unit_layouts(config);
  const bench::ResidentWeights resident(units, config, 11);
  REQUIRE(resident.num_units() == static_cast<int>(units.size()));
  for (std::size_t u = 0; u < units.size(); ++u) {
    std::vector<float> expected(static_cast<std::size_t>(units[u].numel));
    model::init_unit_range(units[u], config, 11, 0, units[u].numel, expected.data());
    const int unit = static_cast<int>(u);
    CHECK(copy_of(resident.weights(unit)) == expected);
    CHECK(resident.gradients(unit).size() == expected.size());
    CHECK(std::all_of(resident.gradients(unit).begin(), resident.gradients(unit).end(), [](float g) { return g == 0.0f; }));
    CHECK(resident.pushes(unit) == 0);
  }
}

TEST_CASE("resident weights train to the same bits as the one-rank trainer path", "[model]") {
  for (const bool tied : {false, true}) {
    INFO("tied " << tied);
    const auto config = tiny_config(tied);
    model::LlamaModel m(config, std::make_unique<backend::CpuBackend>());
    const auto batch = batch_of(config.vocab_size);

    distributed::ShardLayout layout(m.units(), 1, 0);
    distributed::ShardStore store(layout, m.units(), config, 5);
    distributed::LocalComm comm(store);
    comm.begin_minibatch();
    const double comm_loss = m.train_microbatch(batch, comm, comm).weighted_loss;

    bench::ResidentWeights resident(m.units(), config, 5);
    const double resident_loss = m.train_microbatch(batch, resident, resident).weighted_loss;
    CHECK(resident_loss == comm_loss);
    CHECK(resident_loss > 1.0);
    for (int u = 0; u < m.num_units(); ++u) {
      INFO("unit " << u);
      const auto numel = static_cast<std::size_t>(m.units()[static_cast<std::size_t>(u)].numel);
      CHECK(copy_of(resident.gradients(u)) == std::vector<float>(store.grad(u), store.grad(u) + numel));
      CHECK(resident.pushes(u) == 1);  // tied: the embedding's gradient is still pushed once
    }
  }
}

TEST_CASE("resident gradients accumulate over microbatches until zeroed", "[model]") {
  const auto config = tiny_config(false);
  model::LlamaModel m(config, std::make_unique<backend::CpuBackend>());
  const auto batch = batch_of(config.vocab_size);
  bench::ResidentWeights resident(m.units(), config, 3);

  m.train_microbatch(batch, resident, resident);
  std::vector<std::vector<float>> once;
  for (int u = 0; u < resident.num_units(); ++u) once.push_back(copy_of(resident.gradients(u)));
  m.train_microbatch(batch, resident, resident);
  for (int u = 0; u < resident.num_units(); ++u) {
    const auto twice = resident.gradients(u);
    for (std::size_t i = 0; i < twice.size(); ++i) {
      REQUIRE(twice[i] == Approx(2.0 * once[static_cast<std::size_t>(u)][i]).epsilon(1e-5).margin(1e-9));
    }
    CHECK(resident.pushes(u) == 2);
  }

  resident.zero_gradients();
  m.train_microbatch(batch, resident, resident);
  for (int u = 0; u < resident.num_units(); ++u) CHECK(copy_of(resident.gradients(u)) == once[static_cast<std::size_t>(u)]);
  CHECK(resident.pushes(0) == 3);  // zeroing gradients does not reset the hand-off count
}

TEST_CASE("given weights are used as they are, and must fit the layout", "[model]") {
  const auto config = tiny_config(false);
  const auto units = model::build_unit_layouts(config);
  std::vector<std::vector<float>> buffers;
  for (const auto& unit : units) buffers.emplace_back(static_cast<std::size_t>(unit.numel), 0.25f);
  buffers[1][3] = -2.0f;

  bench::ResidentWeights resident(units, buffers);
  CHECK(resident.acquire(1)[3] == -2.0f);
  CHECK(resident.acquire(2)[0] == 0.25f);
  resident.weights(2)[0] = 4.0f;  // the span writes through to what acquire() hands out
  CHECK(resident.acquire(2)[0] == 4.0f);
  CHECK_THROWS_AS(resident.acquire(static_cast<int>(units.size())), Error);
  CHECK_THROWS_AS(resident.grad_buffer(-1), Error);

  auto short_unit = buffers;
  short_unit[1].pop_back();
  CHECK_THROWS_WITH(bench::ResidentWeights(units, short_unit),
                    Catch::Contains("unit 1 ('layer.0')") && Catch::Contains("its buffer holds"));
  auto missing_unit = buffers;
  missing_unit.pop_back();
  CHECK_THROWS_WITH(bench::ResidentWeights(units, missing_unit), Catch::Contains("found 3 buffers"));
}
