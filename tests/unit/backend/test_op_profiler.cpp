// ProfilingBackend (backend/op_profiler.h) over the CPU backend: a drop-in Backend (the same bits
// as the backend alone, recording or not), whose profile names every GEMM of a LLaMA step by its
// role with the calls and FLOPs the step makes, on shapes where the shapes alone cannot tell the
// roles apart (q_dim == hidden: q and o_proj alike; 2 x intermediate == vocab: gate_up and lm_head
// alike; k and v always), with and without Qwen3's q/k norm, under every recomputation mode; whose
// weight casts follow the backend's copies; and whose op times add up to no more than the step's.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "odc/backend/cpu_backend.h"
#include "odc/backend/op_profiler.h"
#include "odc/kernels/adamw.h"
#include "odc/model/llama_model.h"
#include "support/resident_weights.h"

using namespace odc;

namespace {

// q_dim == hidden (4 heads of 4), 2 x intermediate == vocab (24), k and v 8 wide; tied with q/k/v
// biases, or untied with Qwen3's q/k norm.
model::LlamaConfig colliding(bool qk_norm) {
  model::LlamaConfig c;
  c.vocab_size = 24;
  c.hidden_size = 16;
  c.intermediate_size = 12;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 4;
  c.max_position_embeddings = 64;
  c.tie_word_embeddings = !qk_norm;
  c.qk_norm = qk_norm;
  c.attention_bias = !qk_norm;  // the model has no Qwen3 bias (it would add one to o_proj too)
  return c;
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

backend::GemmClassifier classifier(const model::LlamaConfig& c) {
  return backend::llama_gemm_classifier({c.hidden_size, c.q_dim(), c.kv_dim(), c.intermediate_size, c.vocab_size});
}

struct Profiled {
  std::unique_ptr<model::LlamaModel> model;
  backend::ProfilingBackend* profiler = nullptr;
};

Profiled profiled_model(const model::LlamaConfig& c) {
  auto p = std::make_unique<backend::ProfilingBackend>(std::make_unique<backend::CpuBackend>(1, DType::bf16),
                                                       classifier(c));
  Profiled out;
  out.profiler = p.get();
  out.model = std::make_unique<model::LlamaModel>(c, std::move(p));
  return out;
}

}  // namespace

TEST_CASE("a model on the profiler trains to the same bits as on its backend, recording or not", "[backend][profile]") {
  const auto config = colliding(true);
  const auto batch = batch_of(config.vocab_size);
  model::LlamaModel plain(config, std::make_unique<backend::CpuBackend>(1, DType::bf16));
  Profiled profiled = profiled_model(config);
  bench::ResidentWeights a(plain.units(), config, 3);
  bench::ResidentWeights b(profiled.model->units(), config, 3);
  for (const bool record : {false, true}) {
    a.zero_gradients();
    b.zero_gradients();
    if (record) profiled.profiler->start();
    const double la = plain.train_microbatch(batch, a, a).weighted_loss;
    const double lb = profiled.model->train_microbatch(batch, b, b).weighted_loss;
    if (record) CHECK(!profiled.profiler->stop().ops.empty());
    CHECK(la == lb);
    for (int u = 0; u < a.num_units(); ++u) {
      const auto ga = a.gradients(u), gb = b.gradients(u);
      CHECK(std::equal(ga.begin(), ga.end(), gb.begin(), gb.end()));
    }
  }
}

TEST_CASE("the LLaMA classifier names every GEMM of a step by its role, by the op order", "[backend][profile]") {
  for (const bool qk_norm : {false, true}) {
    for (const auto mode : {model::Recompute::none, model::Recompute::selective, model::Recompute::full}) {
      const auto c = colliding(qk_norm);
      INFO("qk_norm " << qk_norm << ", recompute " << model::recompute_name(mode));
      Profiled p = profiled_model(c);
      p.model->set_recompute(mode);
      bench::ResidentWeights weights(p.model->units(), c, 5);
      const auto batch = batch_of(c.vocab_size);
      p.profiler->start();
      p.model->train_microbatch(batch, weights, weights);
      const backend::OpProfile profile = p.profiler->stop();

      const double t = static_cast<double>(batch.num_tokens());
      const double rows = t - 2;  // each sequence's last position predicts nothing
      const std::int64_t layers = c.num_hidden_layers, reruns = mode == model::Recompute::none ? 1 : 2;
      const double h = static_cast<double>(c.hidden_size), q = static_cast<double>(c.q_dim());
      const double kv = static_cast<double>(c.kv_dim()), f = static_cast<double>(c.intermediate_size);
      const double v = static_cast<double>(c.vocab_size);
      struct Expected {
        const char* op;
        const char* role;
        std::int64_t calls;
        double flops;  // per call
      };
      const std::vector<Expected> expected = {
          {"linear_forward", "q", layers * reruns, 2 * t * h * q},
          {"linear_forward", "k", layers * reruns, 2 * t * h * kv},
          {"linear_forward", "v", layers * reruns, 2 * t * h * kv},
          {"linear_forward_residual", "o_proj", layers * reruns, 2 * t * q * h},
          {"linear_forward", "gate_up", layers * reruns, 2 * t * h * 2 * f},
          {"linear_forward_residual", "down", layers, 2 * t * f * h},
          {"linear_forward", "lm_head", 1, 2 * rows * h * v},
          {"linear_backward", "q", layers, 4 * t * h * q},
          {"linear_backward", "k", layers, 4 * t * h * kv},
          {"linear_backward", "v", layers, 4 * t * h * kv},
          {"linear_backward", "o_proj", layers, 4 * t * q * h},
          {"linear_backward", "gate_up", layers, 4 * t * h * 2 * f},
          {"linear_backward", "down", layers, 4 * t * f * h},
          {"linear_backward", "lm_head", 1, 4 * rows * h * v},
      };
      std::size_t gemm_categories = 0;
      for (const auto& op : profile.ops) gemm_categories += op.measure() == backend::OpMeasure::flops && !op.name.starts_with("attention");
      CHECK(gemm_categories == expected.size());  // nothing left unnamed ("gemm <in>x<out>")
      for (const auto& e : expected) {
        INFO(e.op << " " << e.role);
        const backend::OpCategory* found = profile.find(e.op, e.role);
        REQUIRE(found != nullptr);
        CHECK(found->calls == e.calls);
        CHECK(found->flops == e.flops * static_cast<double>(e.calls));
      }
      const backend::OpCategory* attention = profile.find("attention_forward", "");
      REQUIRE(attention != nullptr);
      CHECK(attention->calls == layers * (mode == model::Recompute::full ? 2 : 1));
      CHECK(attention->flops == attention->calls * 4.0 * (9 * 10 / 2 + 13 * 14 / 2) * q);
      const auto qkv = profile.qkv_sums();
      REQUIRE(qkv.size() == 2);  // linear_forward and linear_backward
      CHECK(qkv[1].flops == 4 * t * h * (q + 2 * kv) * static_cast<double>(layers));
    }
  }
}

TEST_CASE("weights() calls are casts or reuses as the backend's copies are", "[backend][profile]") {
  const auto c = colliding(false);  // tied: the head reads unit 0's live copy again
  Profiled p = profiled_model(c);
  bench::ResidentWeights weights(p.model->units(), c, 5);
  const auto batch = batch_of(c.vocab_size);
  const auto step = [&] {
    p.profiler->start();
    p.model->train_microbatch(batch, weights, weights);
    return p.profiler->stop();
  };
  const auto calls = [](const backend::OpProfile& profile, const char* role) {
    const backend::OpCategory* found = profile.find("weights", role);
    return found == nullptr ? std::int64_t{0} : found->calls;
  };
  const std::int64_t layers = c.num_hidden_layers;
  std::int64_t all = 0;
  for (const auto& u : p.model->units()) all += u.numel;
  const backend::OpProfile fresh = step();
  CHECK(calls(fresh, "cast") == 2 * layers + 2);  // every unit forward, the layers again backward
  CHECK(calls(fresh, "reuse") == 1);
  const std::int64_t layer = p.model->units()[1].numel;
  CHECK(fresh.find("weights", "cast")->bytes == static_cast<double>((all + layers * layer) * (4 + 4)));
  // Kept copies: made once, then reused until the weights change.
  p.model->backend().keep_weight_copies(true);
  CHECK(calls(step(), "cast") == layers + 2);  // the forward's copies, kept for the backward
  const backend::OpProfile kept = step();
  CHECK(calls(kept, "cast") == 0);
  CHECK(calls(kept, "reuse") == 2 * layers + 3);
  p.model->backend().weights_changed();
  CHECK(calls(step(), "cast") == layers + 2);  // redone at the forward acquires only
}

TEST_CASE("the profile's op times add up to at most the step's wall time", "[backend][profile]") {
  const auto c = colliding(false);
  Profiled p = profiled_model(c);
  bench::ResidentWeights weights(p.model->backend(), p.model->units(), c, 5);  // AdamW on the backend
  const auto batch = batch_of(c.vocab_size);
  const auto t0 = std::chrono::steady_clock::now();
  p.profiler->start();
  p.model->train_microbatch(batch, weights, weights);
  kernels::AdamWParams params;
  params.step = 1;
  weights.adamw_step(params);
  const backend::OpProfile profile = p.profiler->stop();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const auto& op : profile.ops) CHECK(op.seconds >= 0);
  CHECK(profile.seconds() > 0);
  CHECK(profile.seconds() <= wall);  // disjoint intervals inside the window, on one clock
  CHECK(profile.find("adamw_step", "") != nullptr);
  CHECK_THROWS_WITH(p.profiler->stop(), Catch::Contains("stop without start"));
}
