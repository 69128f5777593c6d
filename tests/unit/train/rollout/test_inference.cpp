// train::generate over a small random Hugging Face checkpoint: with the KV cache it produces the
// same greedy tokens as without (the whole sequence rerun per token), for several prompts, GQA and
// MHA shapes, with and without a repetition penalty; sampling with a seed agrees too; stop
// strings, eos ids and the context end generation, each with its finish reason.
#include <algorithm>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "odc/core/error.h"
#include "odc/io/hf_checkpoint.h"
#include "odc/model/units.h"
#include "odc/train/rollout/inference.h"
#include "unit/temp_dir.h"

using namespace odc;

namespace {

model::LlamaConfig small_config(int heads, int kv_heads) {
  model::LlamaConfig c;
  c.vocab_size = 61;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_hidden_layers = 2;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  c.head_dim = 8;
  c.max_position_embeddings = 64;
  c.initializer_range = 0.3;  // peaked logits: greedy continuations that vary with the prompt
  return c;
}

// A random model written as an HF checkpoint (the weights a trainer with this seed starts from).
void write_model(const std::string& dir, const model::LlamaConfig& config) {
  const auto units = model::build_unit_layouts(config);
  io::write_hf_checkpoint(dir, config, "LlamaForCausalLM", DType::f32, [&](int unit, float* out) {
    const auto& layout = units[static_cast<std::size_t>(unit)];
    model::init_unit_range(layout, config, 17, 0, layout.numel, out);
  });
}

// One letter per id: stop strings can be placed exactly.
std::string letters(const std::vector<std::int32_t>& ids) {
  std::string text;
  for (const auto id : ids) text += static_cast<char>('a' + id % 26);
  return text;
}

const std::vector<std::vector<std::int32_t>> kPrompts = {{1}, {5, 9, 13}, {60, 2, 2, 7, 31, 44, 8}, {20, 21}};

}  // namespace

TEST_CASE("generate: the KV cache gives the same greedy tokens as recomputing the sequence (GQA and MHA)",
          "[train][inference]") {
  for (const int kv_heads : {2, 4, 1}) {
    test::TempDir dir("generate_cache");
    write_model(dir.file("model"), small_config(4, kv_heads));
    train::LoadedModel model(dir.file("model"), 1);
    std::set<std::int32_t> distinct;
    for (const double penalty : {1.0, 1.3}) {
      for (const auto& prompt : kPrompts) {
        train::GenerateOptions options;
        options.max_new_tokens = 30;
        options.repetition_penalty = penalty;
        const auto cached = train::generate(model, prompt, options);
        options.use_cache = false;
        const auto recomputed = train::generate(model, prompt, options);
        INFO("kv heads " << kv_heads << " penalty " << penalty << " prompt of " << prompt.size());
        CHECK(cached.ids.size() == 30);
        CHECK(cached.ids == recomputed.ids);
        CHECK(cached.finish == train::FinishReason::length);
        distinct.insert(cached.ids.begin(), cached.ids.end());
      }
    }
    CHECK(distinct.size() >= 5);  // the continuations are not one repeated token
  }
}

TEST_CASE("generate: seeded top-k/top-p sampling draws the same tokens with and without the cache",
          "[train][inference]") {
  test::TempDir dir("generate_sample");
  write_model(dir.file("model"), small_config(4, 2));
  train::LoadedModel model(dir.file("model"), 1);
  train::GenerateOptions options;
  options.max_new_tokens = 20;
  options.temperature = 0.9;
  options.top_k = 8;
  options.top_p = 0.95;
  options.seed = 3;
  const auto cached = train::generate(model, kPrompts[2], options);
  options.use_cache = false;
  CHECK(train::generate(model, kPrompts[2], options).ids == cached.ids);
  options.seed = 4;
  CHECK(train::generate(model, kPrompts[2], options).ids != cached.ids);
}

TEST_CASE("generate: stop strings cut the text before the earliest one, eos and the context end it too",
          "[train][inference]") {
  test::TempDir dir("generate_stop");
  write_model(dir.file("model"), small_config(4, 2));
  train::GenerateOptions options;
  options.max_new_tokens = 24;
  {
    train::LoadedModel model(dir.file("model"), 1);
    const auto free_run = train::generate(model, kPrompts[1], options, letters);
    const std::string text = free_run.text;
    REQUIRE(text == letters(free_run.ids));
    REQUIRE(text.size() == 24);
    for (const bool use_cache : {true, false}) {
      options.use_cache = use_cache;
      options.stop = {text.substr(9, 3)};
      const std::size_t at = text.find(options.stop[0]);
      auto stopped = train::generate(model, kPrompts[1], options, letters);
      INFO("cache " << use_cache);
      CHECK(stopped.finish == train::FinishReason::stop);
      CHECK(stopped.text == text.substr(0, at));
      CHECK(stopped.ids.size() == at + 3);  // generation ends with the token that completes it
      // Of two stop strings the earliest in the text wins, whatever their order.
      options.stop = {text.substr(15, 2), text.substr(4, 2)};
      stopped = train::generate(model, kPrompts[1], options, letters);
      CHECK(stopped.text == text.substr(0, std::min(text.find(options.stop[0]), text.find(options.stop[1]))));
      // A stop string that never appears: the full run.
      options.stop = {"0"};
      stopped = train::generate(model, kPrompts[1], options, letters);
      CHECK(stopped.finish == train::FinishReason::length);
      CHECK(stopped.text == text);
    }
    options.stop = {"x"};
    CHECK_THROWS_WITH(train::generate(model, kPrompts[1], options),
                      Catch::Contains("stop strings need a decoder of the generated ids"));
    options.stop.clear();
    // The context (64 positions) ends a 60-token prompt's continuation after 4 tokens.
    const std::vector<std::int32_t> long_prompt(60, 3);
    for (const bool use_cache : {true, false}) {
      options.use_cache = use_cache;
      const auto at_context = train::generate(model, long_prompt, options);
      CHECK(at_context.ids.size() == 4);
      CHECK(at_context.finish == train::FinishReason::context);
    }
    options.use_cache = true;
    options.max_new_tokens = 0;
    const auto none = train::generate(model, kPrompts[1], options, letters);
    CHECK(none.ids.empty());
    CHECK(none.text.empty());
    CHECK(none.finish == train::FinishReason::length);
    options.max_new_tokens = 24;
    std::ofstream(dir.file("model") + "/generation_config.json") << "{\"eos_token_id\": " << free_run.ids[6] << "}";
    const auto first = static_cast<std::size_t>(std::find(free_run.ids.begin(), free_run.ids.end(), free_run.ids[6]) -
                                                free_run.ids.begin());
    train::LoadedModel with_eos(dir.file("model"), 1);
    const auto ended = train::generate(with_eos, kPrompts[1], options);
    CHECK(ended.finish == train::FinishReason::eos);
    CHECK(ended.ids == std::vector<std::int32_t>(free_run.ids.begin(), free_run.ids.begin() + first + 1));
  }
  CHECK(std::string(train::finish_reason_name(train::FinishReason::context)) == "context");
}

// A model with the original's sliding window (attention_window 8; attention here spans the whole
// sequence): generation is exact while prompt + new tokens fit in the window, and refused beyond.
TEST_CASE("generate: a prompt plus max_new_tokens beyond the model's attention window is refused",
          "[train][inference]") {
  test::TempDir dir("generate_window");
  auto config = small_config(4, 2);
  config.attention_window = 8;
  const auto units = model::build_unit_layouts(config);
  io::write_hf_checkpoint(dir.file("model"), config, "MistralForCausalLM", DType::f32, [&](int unit, float* out) {
    const auto& layout = units[static_cast<std::size_t>(unit)];
    model::init_unit_range(layout, config, 17, 0, layout.numel, out);
  });
  train::LoadedModel model(dir.file("model"), 1);
  REQUIRE(model.config().attention_window == 8);
  train::GenerateOptions options;
  options.max_new_tokens = 5;
  CHECK(train::generate(model, kPrompts[1], options).ids.size() == 5);  // 3 + 5 = 8 positions: exact
  options.max_new_tokens = 6;
  CHECK_THROWS_WITH(train::generate(model, kPrompts[1], options),
                    Catch::Contains("the prompt has 3 tokens and max_new_tokens is 6: 9 tokens, more than the model's "
                                    "attention window of 8") &&
                        Catch::Contains("sliding_window in " + dir.file("model") + "/config.json") &&
                        Catch::Contains("keep the prompt plus max_new_tokens within 8"));
}

TEST_CASE("generate: a logit that is not finite is an error naming the model and the position", "[train][inference]") {
  test::TempDir dir("generate_overflow");
  const auto config = small_config(4, 2);
  const auto units = model::build_unit_layouts(config);
  // Finite weights whose activations overflow: the last unit (final norm and head) at 3e38. Greedy
  // decoding of such logits picked an arbitrary token (odc-generate printed NUL characters, exit 0).
  io::write_hf_checkpoint(dir.path().string(), config, "LlamaForCausalLM", DType::f32, [&](int unit, float* out) {
    const auto& layout = units[static_cast<std::size_t>(unit)];
    model::init_unit_range(layout, config, 17, 0, layout.numel, out);
    if (unit + 1 == static_cast<int>(units.size())) std::fill(out, out + layout.numel, 3e38f);
  });
  train::LoadedModel m(dir.path().string(), 1);
  train::GenerateOptions options;
  options.max_new_tokens = 3;
  CHECK_THROWS_WITH(train::generate(m, {5, 9, 13}, options),
                    Catch::Contains("the model in '" + dir.path().string() + "' gives a logit that is not finite") &&
                        Catch::Contains("after position 2 of the sequence (the prompt's 3 tokens and 0 generated)"));
}
