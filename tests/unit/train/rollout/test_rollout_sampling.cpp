// sample_rollouts: G completions per prompt decoded many at a time give the same completions as
// one at a time (each has its own seeded sampler; the batched forward only changes the GEMMs'
// summation order), every recorded log-probability is log softmax(logits / T) of the model's full
// forward over prompt + completion at that position (1e-5: fp32 summation order), an eos id ends
// a completion, and bad prompts and options are errors.
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "odc/backend/cpu_backend.h"
#include "odc/core/error.h"
#include "odc/model/llama_model.h"
#include "support/resident_weights.h"
#include "odc/train/rollout/rollout_sampling.h"

using namespace odc;

namespace {

model::LlamaConfig tiny() {
  return model::LlamaConfig::from_json(
      {{"vocab_size", 29}, {"hidden_size", 32}, {"intermediate_size", 48}, {"num_hidden_layers", 2},
       {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"rms_norm_eps", 1e-5},
       {"max_position_embeddings", 32}, {"initializer_range", 0.5}},
      "test", true);
}

}  // namespace

TEST_CASE("sample_rollouts: batched equals one at a time, log-probabilities are the model's", "[train][rl]") {
  const auto config = tiny();
  model::LlamaModel m(config, std::make_unique<backend::CpuBackend>());
  bench::ResidentWeights weights(m.units(), config, 9);
  const std::vector<std::vector<std::int32_t>> prompts{{1, 2, 3}, {4}, {5, 6, 7, 8, 9, 10}};
  train::RolloutOptions options;
  options.sampling.temperature = 0.8;
  options.sampling.top_k = 20;
  options.sampling.max_new_tokens = 7;
  options.sampling.seed = 5;
  options.group_size = 4;
  options.concurrency = 5;  // 12 completions through 5 slots: slots are refilled
  const auto batched = train::sample_rollouts(m, weights, prompts, options);
  options.concurrency = 1;
  const auto alone = train::sample_rollouts(m, weights, prompts, options);
  REQUIRE(batched.size() == 12);
  REQUIRE(alone.size() == 12);
  double worst = 0.0;
  int distinct = 0;
  for (std::size_t i = 0; i < batched.size(); ++i) {
    const auto& c = batched[i];
    CHECK(c.prompt == static_cast<std::int64_t>(i / 4));
    CHECK(c.sample == static_cast<std::int64_t>(i % 4));
    CHECK(c.ids == alone[i].ids);
    CHECK(c.ids.size() == 7);  // no eos ids given: every completion runs to max_new_tokens
    CHECK_FALSE(c.eos);
    if (i % 4 != 0 && c.ids != batched[i - 1].ids) ++distinct;
    // The log-probabilities against the full forward of prompt + completion.
    std::vector<std::int32_t> seq = prompts[static_cast<std::size_t>(c.prompt)];
    const std::size_t prompt_length = seq.size();
    seq.insert(seq.end(), c.ids.begin(), c.ids.end());
    model::PackedBatch batch;
    batch.append(seq.data(), nullptr, static_cast<std::int64_t>(seq.size()), 0.0f);
    std::vector<float> logits;
    m.forward(batch, weights, &logits);
    for (std::size_t j = 0; j < c.ids.size(); ++j) {
      const std::size_t row = prompt_length + j - 1;  // the position that predicts completion token j
      const std::span<const float> r(logits.data() + row * 29, 29);
      const double want = train::token_logprob(r, c.ids[j], 0.8);
      worst = std::max(worst, std::abs(static_cast<double>(c.logprobs[j]) - want));
    }
  }
  CAPTURE(worst);
  CHECK(worst < 1e-5);
  CHECK(distinct >= 6);  // the samples of a prompt differ (their seeds do)
}

TEST_CASE("sample_rollouts: an eos id ends a completion, bad prompts are errors", "[train][rl]") {
  const auto config = tiny();
  model::LlamaModel m(config, std::make_unique<backend::CpuBackend>());
  bench::ResidentWeights weights(m.units(), config, 9);
  train::RolloutOptions options;
  options.sampling.temperature = 1.0;
  options.sampling.max_new_tokens = 5;
  for (std::int32_t id = 0; id < 29; ++id) options.eos.push_back(id);  // every id ends it
  const std::vector<std::vector<std::int32_t>> prompts{{1, 2}};
  const auto out = train::sample_rollouts(m, weights, prompts, options);
  REQUIRE(out.size() == 4);
  for (const auto& c : out) {
    CHECK(c.eos);
    CHECK(c.ids.size() == 1);
  }
  const std::vector<std::vector<std::int32_t>> empty{{}};
  CHECK_THROWS_WITH(train::sample_rollouts(m, weights, empty, options), Catch::Contains("prompt 0 is empty"));
  const std::vector<std::vector<std::int32_t>> too_long{std::vector<std::int32_t>(32, 1)};
  CHECK_THROWS_WITH(train::sample_rollouts(m, weights, too_long, options), Catch::Contains("no room to generate"));
  options.group_size = 0;
  CHECK_THROWS_WITH(train::sample_rollouts(m, weights, prompts, options), Catch::Contains("group size 0"));
}

TEST_CASE("token_logprob is log softmax(logits / T), T = 1 for greedy", "[train][rl]") {
  const std::vector<float> logits{1.0f, 2.0f, -0.5f};
  double z = 0.0;
  for (const float l : logits) z += std::exp(l / 2.0);
  CHECK(train::token_logprob(logits, 1, 2.0) == Approx(1.0 - std::log(z)));
  double z1 = 0.0;
  for (const float l : logits) z1 += std::exp(l);
  CHECK(train::token_logprob(logits, 2, 0.0) == Approx(-0.5 - std::log(z1)));
}

TEST_CASE("sample_rollouts: a stop string ends a completion at the token that completes it", "[train][rl]") {
  const auto config = tiny();
  model::LlamaModel m(config, std::make_unique<backend::CpuBackend>());
  bench::ResidentWeights weights(m.units(), config, 9);
  // Tokens of 1 to 3 bytes, so a stop string spans several of them.
  const auto decode = [](std::span<const std::int32_t> ids) {
    std::string text;
    for (const auto id : ids) text += std::string(static_cast<std::size_t>(id % 3 + 1), static_cast<char>('a' + id % 26));
    return text;
  };
  train::RolloutOptions options;
  options.sampling.temperature = 1.0;
  options.sampling.max_new_tokens = 12;
  options.sampling.seed = 2;
  options.concurrency = 3;
  const std::vector<std::vector<std::int32_t>> prompts{{1, 2}, {3}};
  const auto free = train::sample_rollouts(m, weights, prompts, options);
  // A stop string of 4 bytes from the middle of the first completion's text.
  const std::string text = decode(free[0].ids);
  REQUIRE(text.size() >= 10);
  const std::string stop = text.substr(text.size() / 2, 4);
  options.stop = {stop};
  options.decode = decode;
  const auto stopped = train::sample_rollouts(m, weights, prompts, options);
  REQUIRE(stopped.size() == free.size());
  int ended = 0;
  for (std::size_t i = 0; i < free.size(); ++i) {
    // The same draws, cut at the first token whose text completes the stop string.
    std::size_t cut = free[i].ids.size();
    for (std::size_t k = 1; k <= free[i].ids.size(); ++k) {
      if (decode(std::span<const std::int32_t>(free[i].ids).first(k)).find(stop) != std::string::npos) {
        cut = k;
        break;
      }
    }
    CAPTURE(i, stop);
    CHECK(stopped[i].ids == std::vector<std::int32_t>(free[i].ids.begin(), free[i].ids.begin() + static_cast<std::ptrdiff_t>(cut)));
    CHECK(stopped[i].logprobs.size() == stopped[i].ids.size());
    CHECK(stopped[i].stopped == (cut < free[i].ids.size() || decode(free[i].ids).find(stop) != std::string::npos));
    ended += stopped[i].stopped ? 1 : 0;
  }
  CHECK(ended >= 1);
  options.decode = nullptr;
  CHECK_THROWS_WITH(train::sample_rollouts(m, weights, prompts, options), Catch::Contains("stop strings need a decoder"));
  options.decode = decode;
  options.stop = {""};
  CHECK_THROWS_WITH(train::sample_rollouts(m, weights, prompts, options), Catch::Contains("empty stop string"));
}

TEST_CASE("sample_rollouts: logits that are not finite, an attention window, a stop request are errors naming them",
          "[train][rl]") {
  auto config = tiny();
  model::LlamaModel m(config, std::make_unique<backend::CpuBackend>());
  train::RolloutOptions options;
  options.sampling.temperature = 1.0;
  options.sampling.max_new_tokens = 4;
  options.model_name = "the policy at step 7";
  options.prompt_names = {"p.jsonl:1", "p.jsonl:2"};
  const std::vector<std::vector<std::int32_t>> prompts{{1, 2}, {3, 4, 5}};
  {
    // Finite weights whose activations overflow: the last unit (final norm and head) at 3e38.
    bench::ResidentWeights weights(m.units(), config, 9);
    const int last = weights.num_units() - 1;
    for (float& w : weights.weights(last)) w = 3e38f;
    CHECK_THROWS_WITH(train::sample_rollouts(m, weights, prompts, options),
                      Catch::Contains("the policy at step 7 gives a logit that is not finite") &&
                          Catch::Contains("after position 1 of p.jsonl:1's completion 0 (its 2 tokens and 0 drawn)"));
  }
  bench::ResidentWeights weights(m.units(), config, 9);
  // A window of 6: 3 + 4 tokens do not fit (the original model would attend to the last 6 only).
  config.attention_window = 6;
  model::LlamaModel windowed(config, std::make_unique<backend::CpuBackend>());
  options.max_new_tokens_key = "rl.max_new_tokens";
  options.window_origin = "sliding_window in m/config.json";
  CHECK_THROWS_WITH(train::sample_rollouts(windowed, weights, prompts, options),
                    Catch::Contains("p.jsonl:2: the prompt has 3 tokens and rl.max_new_tokens is 4: 7 tokens, more than "
                                    "the model's attention window of 6 (sliding_window in m/config.json)") &&
                        Catch::Contains("(rl.max_new_tokens at most 3 for this prompt)"));
  options.sampling.max_new_tokens = 3;
  CHECK(train::sample_rollouts(windowed, weights, prompts, options).size() == 8);
  int asked = 0;
  options.stop_requested = [&] { return ++asked > 1; };  // after the first round of forwards
  CHECK_THROWS_WITH(train::sample_rollouts(m, weights, prompts, options),
                    Catch::Contains("sampling stopped by a stop request"));
}
