// The step estimate (train/plan/step_estimate.h): its predicted calls are exactly the ones a profiled
// step makes (categories, calls, FLOPs, bytes), so a profile's rates reproduce that profile's time
// at its own shape; it scales as the work does (GEMMs linear in tokens, attention in the causal
// pairs), orders the recomputation modes, takes a profile's measured rates as they are (a made-up
// profile whose rates give the estimate by hand), and refuses a malformed or mismatched profile
// naming the file and the field.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "odc/backend/cpu_backend.h"
#include "odc/backend/op_profiler.h"
#include "odc/core/error.h"
#include "odc/kernels/adamw.h"
#include "odc/model/llama_model.h"
#include "support/resident_weights.h"
#include "odc/train/plan/step_estimate.h"
#include "unit/temp_dir.h"

using namespace odc;

namespace {

model::LlamaConfig small_model(bool qwen3) {
  model::LlamaConfig c;
  c.vocab_size = 24;
  c.hidden_size = 16;
  c.intermediate_size = 12;  // 2 x 12 == vocab: gate_up and lm_head alike
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;  // q_dim == hidden
  c.num_key_value_heads = 2;
  c.head_dim = 4;
  c.max_position_embeddings = 256;
  c.tie_word_embeddings = !qwen3;
  c.qk_norm = qwen3;
  c.attention_bias = !qwen3;
  return c;
}

train::StepShape shape_of(const model::LlamaConfig& c, model::Recompute mode, std::int64_t tokens,
                          std::int64_t sequences) {
  train::StepShape s;
  s.model = c;
  s.device = DeviceKind::cpu;
  s.compute = DType::bf16;
  s.recompute = mode;
  s.tokens = tokens;
  s.sequences = sequences;
  s.optimizer_elements = c.num_parameters();
  return s;
}

// One step as gpu_model_throughput --profile takes it: the microbatch, the gradient norm, AdamW.
backend::OpProfile profiled_step(const model::LlamaConfig& c, model::Recompute mode, int sequences, int length) {
  auto p = std::make_unique<backend::ProfilingBackend>(
      std::make_unique<backend::CpuBackend>(1, DType::bf16),
      backend::llama_gemm_classifier({c.hidden_size, c.q_dim(), c.kv_dim(), c.intermediate_size, c.vocab_size}));
  backend::ProfilingBackend& profiler = *p;
  model::LlamaModel m(c, std::move(p));
  m.set_recompute(mode);
  bench::ResidentWeights weights(m.backend(), m.units(), c, 5);
  model::PackedBatch batch;
  for (int s = 0; s < sequences; ++s) {
    std::vector<std::int32_t> tokens;
    for (int i = 0; i < length; ++i) tokens.push_back(static_cast<std::int32_t>((7 * i + s) % c.vocab_size));
    batch.append(tokens.data(), nullptr, length, 0.01f);
  }
  profiler.start();
  m.train_microbatch(batch, weights, weights);
  for (int u = 0; u < weights.num_units(); ++u) {
    m.backend().sum_of_squares(m.backend().gradients(weights.grad_buffer(u), m.units()[static_cast<std::size_t>(u)].numel));
  }
  kernels::AdamWParams params;
  params.step = 1;
  weights.adamw_step(params);
  return profiler.stop();
}

backend::ProfileDocument document_of(backend::OpProfile profile) {
  backend::ProfileDocument d;
  d.shape = "test";
  d.tokens = 24;
  d.sequences = 2;
  d.layers = 2;
  d.hidden = d.q_dim = 16;
  d.kv_dim = 8;
  d.intermediate = 12;
  d.vocab = 24;
  d.recompute = "none";
  d.attention = "cpu";
  d.device = "cpu";
  d.device_description = "cpu-bf16";
  d.step_seconds = profile.seconds();
  d.profile = std::move(profile);
  return d;
}

// Seconds of the estimate's lines whose category matches `pick`.
template <typename Pick>
double seconds_where(const train::StepEstimate& e, Pick pick) {
  double s = 0.0;
  for (const auto& line : e.lines) s += pick(line) ? line.op.seconds : 0.0;
  return s;
}

const train::StepRates kNominal = train::StepRates::nominal(1e12, 5e11, 1e10, 1e-5, "test rates");

}  // namespace

TEST_CASE("the predicted calls are the ones a profiled step makes, and its rates give back its time", "[train][estimate]") {
  for (const bool qwen3 : {false, true}) {
    for (const auto mode : {model::Recompute::none, model::Recompute::selective, model::Recompute::full}) {
      INFO("qwen3 " << qwen3 << ", recompute " << model::recompute_name(mode));
      const auto c = small_model(qwen3);
      const backend::OpProfile measured = profiled_step(c, mode, 2, 12);
      const train::StepShape shape = shape_of(c, mode, 24, 2);
      backend::OpProfile predicted;
      for (const auto& p : train::predict_ops(shape)) {
        backend::OpCategory& op = predicted.at(p.op.name, p.op.role);
        op.calls += p.op.calls;
        op.flops += p.op.flops;
        op.bytes += p.op.bytes;
      }
      CHECK(predicted.ops.size() == measured.ops.size());
      for (const auto& m : measured.ops) {
        INFO(m.label());
        const backend::OpCategory* p = predicted.find(m.name, m.role);
        REQUIRE(p != nullptr);
        // Whole numbers below 2^53: exact in any order of addition.
        CHECK(p->flops == m.flops);
        CHECK(p->bytes == m.bytes);
        // The trainer's gradient norm is one call over the shard; the profiled step's, one per unit.
        if (m.name != "sum_of_squares") CHECK(p->calls == m.calls);
      }
      const train::StepEstimate e =
          train::estimate_step(shape, train::StepRates::measured(document_of(measured), DeviceKind::cpu, "p.json"));
      // Every category but the copies handed out again (no work: the estimate charges them nothing).
      const backend::OpCategory* reuse = measured.find("weights", "reuse");
      const double estimated = e.microbatch_seconds() + e.seconds(train::StepPhase::step);
      CHECK(estimated == Approx(measured.seconds() - (reuse ? reuse->seconds : 0.0)).epsilon(1e-9));
    }
  }
}

TEST_CASE("the estimate scales as the work: GEMMs with the tokens, attention with the causal pairs", "[train][estimate]") {
  const auto c = small_model(false);
  const auto one = train::estimate_step(shape_of(c, model::Recompute::none, 64, 1), kNominal);
  const auto two = train::estimate_step(shape_of(c, model::Recompute::none, 128, 1), kNominal);
  const auto layer_gemms = [](const train::EstimateLine& l) {
    return l.op.name.starts_with("linear_") && l.op.role != "lm_head";
  };
  const auto attention = [](const train::EstimateLine& l) { return l.op.name.starts_with("attention_"); };
  CHECK(seconds_where(two, layer_gemms) == Approx(2 * seconds_where(one, layer_gemms)).epsilon(1e-12));
  // One sequence: pairs 128 * 129 / 2 against 64 * 65 / 2, 3.97x.
  CHECK(seconds_where(two, attention) == Approx(seconds_where(one, attention) * (128.0 * 129) / (64.0 * 65)).epsilon(1e-12));
  CHECK(seconds_where(two, attention) > 2 * seconds_where(one, attention));
  // The optimizer step does not depend on the tokens.
  CHECK(two.seconds(train::StepPhase::step) == one.seconds(train::StepPhase::step));
}

TEST_CASE("recomputation costs none < selective < full, selective rerunning all but attention", "[train][estimate]") {
  const auto c = small_model(true);
  const auto at = [&](model::Recompute mode) { return train::estimate_step(shape_of(c, mode, 256, 2), kNominal); };
  const auto none = at(model::Recompute::none), selective = at(model::Recompute::selective), full = at(model::Recompute::full);
  CHECK(none.seconds(train::StepPhase::recompute) == 0);
  CHECK(none.microbatch_seconds() < selective.microbatch_seconds());
  CHECK(selective.microbatch_seconds() < full.microbatch_seconds());
  const auto attention_forward = [](const train::EstimateLine& l) { return l.op.name == "attention_forward"; };
  CHECK(full.seconds(train::StepPhase::recompute) - selective.seconds(train::StepPhase::recompute) ==
        Approx(seconds_where(none, attention_forward)).epsilon(1e-12));
  CHECK(none.seconds(train::StepPhase::forward) == selective.seconds(train::StepPhase::forward));
}

TEST_CASE("a profile's measured rates are used as they are", "[train][estimate]") {
  // A made-up profile: every GEMM at 1 TFLOP/s, attention at 2, RMSNorm forward at 5 GB/s, and
  // every other category too quick to cost anything (0 seconds): the estimate is then by hand.
  const auto c = small_model(false);
  const train::StepShape shape = shape_of(c, model::Recompute::none, 256, 2);
  backend::OpProfile made_up;
  for (const auto& p : train::predict_ops(shape)) {
    backend::OpCategory& op = made_up.at(p.op.name, p.op.role);
    op.calls = 1;
    op.flops = op.bytes = 1;  // work to rate; its time below
    if (op.measure() == backend::OpMeasure::flops) {
      const bool attention = op.name.starts_with("attention");
      op.flops = attention ? 4e12 : 3e12;
      op.seconds = attention ? 2.0 : 3.0;
    }
    if (op.name == "rmsnorm_forward") {
      op.bytes = 1e10;
      op.seconds = 2.0;
    }
  }
  const auto e = train::estimate_step(shape, train::StepRates::measured(document_of(made_up), DeviceKind::cpu, "x.json"));
  // By hand: the linear layers' 6 FLOPs per parameter and token, less the LM head at each
  // sequence's last token (no target); attention 12 * q_dim per causal pair and layer; RMSNorm
  // forward 2 per layer and the final one, each reading and writing tokens x hidden fp32
  // activations, reading the fp32 weight copy and writing an fp32 rstd per token.
  const double t = 256, pairs = 2 * 128.0 * 129 / 2, h = 16, v = 24;
  const double gemm = c.linear_flops_per_token() * t - 6 * h * v * 2;
  const double attention = c.attention_flops_per_pair() * pairs;
  const double rmsnorm = (2 * 2 + 1) * (t * h * 2 * 4 + h * 4 + t * 4);
  CHECK(e.microbatch_seconds() == Approx(gemm / 1e12 + attention / 2e12 + rmsnorm / 5e9).epsilon(1e-12));
  CHECK(e.seconds(train::StepPhase::step) == 0);
  CHECK(e.measured);
  CHECK_THAT(e.source, Catch::Contains("measured: x.json"));
}

TEST_CASE("a malformed or mismatched profile is refused, naming the file and the field", "[train][estimate]") {
  const auto c = small_model(false);
  const backend::ProfileDocument good = document_of(profiled_step(c, model::Recompute::none, 2, 12));
  const nlohmann::json json = good.to_json();
  CHECK(backend::ProfileDocument::from_json(json, "p.json").profile.ops.size() == good.profile.ops.size());
  const auto refused = [](nlohmann::json j, const std::string& message) {
    INFO(message);
    CHECK_THROWS_WITH(backend::ProfileDocument::from_json(j, "p.json"),
                      Catch::Contains("device profile p.json") && Catch::Contains(message));
  };
  nlohmann::json j = json;
  j.erase("step_seconds");
  refused(j, "the field 'step_seconds' is missing");
  j = json;
  j["ops"][1].erase("seconds");
  refused(j, "the field 'ops[1].seconds' is missing");
  j = json;
  j["ops"][0]["seconds"] = -1.0;
  refused(j, "the field 'ops[0].seconds' must be >= 0");
  j = json;
  j["tokens"] = "many";
  refused(j, "the field 'tokens' must be a number");
  j = json;
  j["bench"] = "gpu_model_throughput";
  refused(j, "expected 'op_profile'");
  j = json;
  j["ops"][2]["name"] = "teleport";
  refused(j, "'ops[2].name' is 'teleport', which is no backend op");

  CHECK_THROWS_WITH(train::StepRates::measured(good, DeviceKind::cuda, "p.json"),
                    Catch::Contains("device profile p.json: the field 'device' is 'cpu' but the run computes on cuda"));
  backend::ProfileDocument lacking = good;
  std::erase_if(lacking.profile.ops, [](const backend::OpCategory& op) { return op.role == "lm_head"; });
  CHECK_THROWS_WITH(train::estimate_step(shape_of(c, model::Recompute::none, 24, 2),
                                         train::StepRates::measured(lacking, DeviceKind::cpu, "p.json")),
                    Catch::Contains("device profile p.json: no 'linear_forward lm_head' among its ops"));

  test::TempDir dir("step_estimate");
  CHECK_THROWS_WITH(backend::read_profile(dir.path() / "absent.json"), Catch::Contains("cannot be read"));
  CHECK_THROWS_WITH(backend::read_profile(dir.write("bad.json", "{\"bench\": ")), Catch::Contains("not JSON"));
  CHECK(backend::read_profile(dir.write("good.json", json.dump())).tokens == good.tokens);
}
