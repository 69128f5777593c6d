// WeightSnapshot: every unit copied once from its source (one acquire and one release per unit, in
// unit order: what lets ranks of a collective comm take it in lockstep), bit for bit, and served
// from its own memory afterwards: a change of the source does not reach it.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "odc/backend/cpu_backend.h"
#include "odc/core/error.h"
#include "odc/model/llama_model.h"
#include "support/resident_weights.h"
#include "odc/model/weight_snapshot.h"
#include "unit/tiny_model.h"

using namespace odc;

namespace {

// A ParamSource that logs its calls (A<unit>, R<unit>) and serves resident weights.
class Logged final : public model::ParamSource {
 public:
  explicit Logged(bench::ResidentWeights& w) : weights(w) {}
  const float* acquire(int u) override {
    log.push_back("A" + std::to_string(u));
    return weights.acquire(u);
  }
  void release(int u) override { log.push_back("R" + std::to_string(u)); }
  bench::ResidentWeights& weights;
  std::vector<std::string> log;
};

}  // namespace

TEST_CASE("WeightSnapshot copies every unit once, in order, and keeps its copy", "[model]") {
  const auto config = test::tiny_model(2);
  backend::CpuBackend backend;
  const auto units = model::build_unit_layouts(config);
  bench::ResidentWeights source(units, config, 17);
  Logged logged(source);
  model::WeightSnapshot snapshot(backend, units, logged);
  CHECK(logged.log == std::vector<std::string>{"A0", "R0", "A1", "R1", "A2", "R2", "A3", "R3"});
  std::int64_t total = 0;
  for (int u = 0; u < static_cast<int>(units.size()); ++u) {
    const auto want = source.weights(u);
    const float* got = snapshot.acquire(u);
    REQUIRE(got != want.data());  // its own memory
    CHECK(std::vector<float>(got, got + want.size()) == std::vector<float>(want.begin(), want.end()));
    total += static_cast<std::int64_t>(want.size());
  }
  CHECK(snapshot.bytes() == total * 4);
  // The source moves on (an optimizer step); the snapshot does not.
  const float before = snapshot.acquire(1)[0];
  source.weights(1)[0] += 1.0f;
  CHECK(snapshot.acquire(1)[0] == before);
  CHECK_THROWS_AS(snapshot.acquire(static_cast<int>(units.size())), Error);
}
