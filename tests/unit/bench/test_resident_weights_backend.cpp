// ResidentWeights in a backend's memory (what the model benchmarks train with on a GPU), here on
// the CPU backend: the same bits as the host placement through training, zeroing and AdamW; AdamW
// is the optimizer kernel's, step for step; weights go in and out through upload/download in both
// placements, and buffers that do not fit the layout are refused. The host placement alone:
// test_resident_weights.cpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "odc/backend/cpu_backend.h"
#include "odc/core/error.h"
#include "odc/kernels/adamw.h"
#include "odc/model/llama_model.h"
#include "support/resident_weights.h"

using namespace odc;

namespace {

model::LlamaConfig tiny_config() {
  nlohmann::json j = {{"vocab_size", 29},       {"hidden_size", 16},        {"intermediate_size", 24},
                      {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2}};
  return model::LlamaConfig::from_json(j, "test", true);
}

model::PackedBatch batch_of(std::int64_t vocab) {
  model::PackedBatch batch;
  for (const std::int32_t length : {9, 13}) {
    std::vector<std::int32_t> tokens;
    for (std::int32_t i = 0; i < length; ++i) tokens.push_back(static_cast<std::int32_t>((5 * i + length) % vocab));
    batch.append(tokens.data(), nullptr, length, 0.05f);
  }
  return batch;
}

std::vector<float> copy_of(std::span<const float> values) { return {values.begin(), values.end()}; }

kernels::AdamWParams adamw(std::int64_t step) {
  kernels::AdamWParams p;
  p.lr = 1e-2;
  p.weight_decay = 0.1;  // decay on every element: visible in every weight
  p.step = step;
  return p;
}

}  // namespace

TEST_CASE("resident weights on a backend train, zero and step to the same bits as on the host", "[model]") {
  const auto config = tiny_config();
  model::LlamaModel m(config, std::make_unique<backend::CpuBackend>());
  const auto batch = batch_of(config.vocab_size);
  bench::ResidentWeights host(m.units(), config, 7);
  bench::ResidentWeights placed(m.backend(), m.units(), config, 7);
  REQUIRE(placed.num_units() == host.num_units());
  CHECK(placed.on_host());  // the CPU backend's memory is the host's
  CHECK(placed.acquire(0) != host.acquire(0));

  for (std::int64_t step = 1; step <= 3; ++step) {
    INFO("step " << step);
    host.zero_gradients();
    placed.zero_gradients();
    const double host_loss = m.train_microbatch(batch, host, host).weighted_loss;
    const double placed_loss = m.train_microbatch(batch, placed, placed).weighted_loss;
    CHECK(placed_loss == host_loss);
    CHECK(host_loss > 1.0);
    for (int u = 0; u < host.num_units(); ++u) {
      CHECK(placed.download_gradients(u) == copy_of(host.gradients(u)));
      CHECK(placed.pushes(u) == step);
    }
    host.adamw_step(adamw(step));
    placed.adamw_step(adamw(step));
    for (int u = 0; u < host.num_units(); ++u) CHECK(placed.download_weights(u) == copy_of(host.weights(u)));
  }
  placed.zero_gradients();
  for (int u = 0; u < placed.num_units(); ++u) {
    for (const float g : placed.download_gradients(u)) REQUIRE(g == 0.0f);
  }
}

TEST_CASE("resident AdamW is the optimizer kernel's, moments kept across steps", "[model]") {
  const auto config = tiny_config();
  model::LlamaModel m(config, std::make_unique<backend::CpuBackend>());
  const auto batch = batch_of(config.vocab_size);
  bench::ResidentWeights resident(m.units(), config, 3);
  m.train_microbatch(batch, resident, resident);

  // The same two steps by hand on copies, with moments that start at zero.
  std::vector<std::vector<float>> weights, exp_avg, exp_avg_sq;
  for (int u = 0; u < resident.num_units(); ++u) {
    weights.push_back(copy_of(resident.weights(u)));
    exp_avg.emplace_back(weights.back().size(), 0.0f);
    exp_avg_sq.emplace_back(weights.back().size(), 0.0f);
  }
  double moved = 0.0;
  for (std::int64_t step = 1; step <= 2; ++step) {
    resident.adamw_step(adamw(step));
    for (std::size_t u = 0; u < weights.size(); ++u) {
      const auto grad = resident.gradients(static_cast<int>(u));
      kernels::cpu::adamw_step(weights[u].data(), grad.data(), exp_avg[u].data(), exp_avg_sq[u].data(),
                               static_cast<std::int64_t>(weights[u].size()), adamw(step));
    }
  }
  for (int u = 0; u < resident.num_units(); ++u) {
    INFO("unit " << u);
    const auto after = copy_of(resident.weights(u));
    CHECK(after == weights[static_cast<std::size_t>(u)]);
    std::vector<float> start(after.size());
    const auto& layout = m.units()[static_cast<std::size_t>(u)];
    model::init_unit_range(layout, config, 3, 0, layout.numel, start.data());
    for (std::size_t i = 0; i < after.size(); ++i) moved = std::max(moved, static_cast<double>(std::abs(after[i] - start[i])));
  }
  // Two steps of lr 1e-2 move a weight by at most about 2e-2 (Adam's step is about lr at most; the
  // decay adds lr * 0.1 * |w|, 1e-3 for a norm weight of 1).
  CHECK(moved > 5e-3);
  CHECK(moved < 2.5e-2);
}

TEST_CASE("resident weights go in and out by copy in both placements and must fit the layout", "[model]") {
  const auto config = tiny_config();
  const auto units = model::build_unit_layouts(config);
  backend::CpuBackend cpu;
  std::vector<std::vector<float>> buffers;
  for (const auto& unit : units) buffers.emplace_back(static_cast<std::size_t>(unit.numel), 0.5f);
  buffers[2][4] = -3.0f;

  bench::ResidentWeights host(units, buffers);
  bench::ResidentWeights placed(cpu, units, buffers);
  for (auto* resident : {&host, &placed}) {
    CHECK(resident->download_weights(2) == buffers[2]);
    CHECK(resident->acquire(2)[4] == -3.0f);
    std::vector<float> changed = buffers[1];
    changed[0] = 9.0f;
    resident->upload_weights(1, changed);
    CHECK(resident->acquire(1)[0] == 9.0f);
    CHECK(resident->download_weights(1) == changed);
    changed.pop_back();
    CHECK_THROWS_WITH(resident->upload_weights(1, changed),
                      Catch::Contains("unit 1 holds") && Catch::Contains("the weights given for it have"));
    CHECK_THROWS_AS(resident->download_gradients(static_cast<int>(units.size())), Error);
  }
  auto missing_unit = buffers;
  missing_unit.pop_back();
  CHECK_THROWS_WITH(bench::ResidentWeights(cpu, units, missing_unit), Catch::Contains("found 3 buffers"));
}
