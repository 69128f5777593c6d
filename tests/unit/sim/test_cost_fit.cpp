// The reference's fitted cost t = a*u^2 + b*u per sequence + c per microbatch (u = s/32000): the
// compute model built from it reproduces the fit exactly for one and for packed sequences, keeps
// the FLOP model's proportions between steps, the published fits are found by shape, other shapes
// are scaled by FLOPs as stated, and the planner's cost is the fit without c.
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "odc/core/device_specs.h"
#include "odc/core/error.h"
#include "odc/sim/cost_fit.h"
#include "odc/sim/schedule.h"

using namespace odc::sim;
using Catch::Matchers::Contains;

namespace {

// The published fits' own shapes, and the 14B shape (no published fit) derived from the 7B one.
const auto k1_5b = published_fits().front().shape;
const auto k7b = published_fits().back().shape;
const auto k14b = [] {
  auto config = k7b;
  config.hidden_size = 5120;
  config.intermediate_size = 13824;
  config.num_hidden_layers = 48;
  config.num_attention_heads = 40;
  config.num_key_value_heads = 8;
  config.head_dim = 128;
  return config;
}();

ComputeModel flop_model(const odc::model::LlamaConfig& config) {
  DeviceComputeOptions options;
  options.devices = 8;
  return compute_model_for_device(config, odc::device_spec("a100-80gb"), options);
}

double microbatch_time(const ComputeModel& model, const std::vector<std::int64_t>& lengths) {
  std::int64_t tokens = 0;
  double pairs = 0.0;
  for (const auto s : lengths) {
    tokens += s;
    pairs += causal_pairs(s);
  }
  return model.microbatch_time(tokens, pairs);
}

}  // namespace

TEST_CASE("the fit compute model gives a*u^2 + b*u per sequence plus c per microbatch", "[sim]") {
  REQUIRE(published_fits().size() == 2);
  CHECK(published_fits().back().shape.hidden_size == 3584);
  const CostFit fit = fit_for_model(k7b);
  REQUIRE(fit.a == 4.348);
  REQUIRE(fit.b == 8.768);
  REQUIRE(fit.c == 0.951);
  const ComputeModel model = compute_model_from_fit(fit, flop_model(k7b));
  // One 32K sequence: u = 1, so a + b + c; one 8K sequence: a/16 + b/4 + c.
  CHECK(microbatch_time(model, {32000}) == Approx(4.348 + 8.768 + 0.951).epsilon(1e-12));
  CHECK(microbatch_time(model, {8000}) == Approx(4.348 / 16 + 8.768 / 4 + 0.951).epsilon(1e-12));
  // Packed: one c for the microbatch, each sequence's own quadratic term (not the square of the sum).
  const std::vector<std::int64_t> packed = {4000, 12000, 20000};
  CHECK(microbatch_time(model, packed) == Approx(fit.microbatch_seconds(packed)).epsilon(1e-12));
  CHECK(fit.microbatch_seconds(packed) < fit.microbatch_seconds({36000}));
  // Splitting two sequences into two microbatches costs one more c.
  CHECK(microbatch_time(model, {4000}) + microbatch_time(model, {12000}) ==
        Approx(microbatch_time(model, {4000, 12000}) + fit.c).epsilon(1e-12));
  // An empty (padding) microbatch still costs nothing.
  CHECK(model.microbatch_time(0, 0.0) == 0.0);
}

TEST_CASE("the fit keeps the FLOP model's proportions between steps", "[sim]") {
  const ComputeModel flops = flop_model(k7b);
  const ComputeModel model = compute_model_from_fit(fit_for_model(k7b), flops);
  REQUIRE(model.forward.size() == flops.forward.size());
  // Decoder layer 3: backward is 3x forward (gradient checkpointing) in both, every term.
  CHECK(model.backward[3].c1 / model.forward[3].c1 == Approx(flops.backward[3].c1 / flops.forward[3].c1));
  CHECK(model.backward[3].c2 / model.forward[3].c2 == Approx(3.0));
  CHECK(model.backward[3].c0 / model.forward[3].c0 == Approx(3.0));
  // The head has no attention; every layer carries the same share of it.
  CHECK(model.head.c2 == 0.0);
  CHECK(model.forward[1].c2 == Approx(model.forward[28].c2));
  CHECK(model.forward[1].floor == 0.0);
  CHECK(model.optimizer_s == flops.optimizer_s);
  CHECK_THAT(model.description, Contains("a=4.348") && Contains("published fit"));
}

TEST_CASE("shapes without a published fit are scaled by FLOPs", "[sim]") {
  const CostFit fit = fit_for_model(k14b);
  const CostFit base = fit_for_model(k7b);
  CHECK(fit.a == Approx(base.a * k14b.attention_flops_per_pair() / k7b.attention_flops_per_pair()));
  CHECK(fit.b == Approx(base.b * k14b.linear_flops_per_token() / k7b.linear_flops_per_token()));
  // c on the line through the 1.5B and 7B fits in linear FLOPs per token.
  const double x0 = k1_5b.linear_flops_per_token();
  const double x1 = k7b.linear_flops_per_token();
  const double x = k14b.linear_flops_per_token();
  CHECK(fit.c == Approx(0.667 + (0.951 - 0.667) * (x - x0) / (x1 - x0)));
  CHECK(fit.c > base.c);
  CHECK_THAT(fit.source, Contains("scaled by FLOPs") && Contains("assumption"));
  CHECK(fit_for_model(k1_5b).a == 1.982);
}

TEST_CASE("fits given as A,B,C and the planner's fit cost", "[sim]") {
  const CostFit fit = parse_fit(" 2, 3 ,0.5", "sim.fit");
  CHECK(fit.a == 2.0);
  CHECK(fit.b == 3.0);
  CHECK(fit.c == 0.5);
  CHECK_THROWS_WITH(parse_fit("2,3", "sim.fit"), Contains("sim.fit") && Contains("A,B,C"));
  CHECK_THROWS_WITH(parse_fit("2,x,1", "sim.fit"), Contains("'x'"));
  CHECK_THROWS_WITH(parse_fit("-1,3,1", "sim.fit"), Contains("'-1'"));
  CHECK_THROWS_WITH(parse_fit("0,0,1", "sim.fit"), Contains("neither"));
  const auto cost = planner_cost_from_fit(fit);
  CHECK(cost.kind == "fit");
  CHECK(cost.cost(32000) == Approx(2.0 + 3.0));  // u = 1, no per-microbatch c
  CHECK(cost.cost(16000) == Approx(2.0 / 4 + 3.0 / 2));
}
