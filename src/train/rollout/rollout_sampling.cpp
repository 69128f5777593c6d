#include "odc/train/rollout/rollout_sampling.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "odc/core/error.h"
#include "odc/core/random.h"
#include "odc/model/kv_cache.h"

namespace odc::train {

double token_logprob(std::span<const float> logits, std::int32_t token, double temperature) {
  ODC_CHECK(token >= 0 && static_cast<std::size_t>(token) < logits.size(), "token {} of {} logits", token,
            logits.size());
  const double t = temperature > 0 ? temperature : 1.0;
  const double top = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (const float l : logits) sum += std::exp((static_cast<double>(l) - top) / t);
  return (static_cast<double>(logits[static_cast<std::size_t>(token)]) - top) / t - std::log(sum);
}

void check_rollout_window(const model::LlamaConfig& model, std::int64_t prompt_tokens, std::int64_t max_new_tokens,
                          const std::string& where, const std::string& max_new_tokens_key,
                          const std::string& window_origin) {
  const std::int64_t window = model.attention_window;
  if (window <= 0 || prompt_tokens + max_new_tokens <= window) return;
  fail("{}: the prompt has {} tokens and {} is {}: {} tokens, more than the model's attention window of {} ({}): the "
       "original model attends only to the last {} tokens, attention here spans the whole sequence, so it would "
       "sample, score and train sequences unlike the original's; keep the prompt plus {} within {}{}",
       where, prompt_tokens, max_new_tokens_key, max_new_tokens, prompt_tokens + max_new_tokens, window, window_origin,
       window, max_new_tokens_key, window,
       prompt_tokens < window
           ? fmt::format(" ({} at most {} for this prompt)", max_new_tokens_key, window - prompt_tokens)
           : std::string(" (shorten the prompt)"));
}

namespace {

// One sequence being decoded: its cache slot, its sampler and what it has drawn.
struct Active {
  std::size_t slot = 0;
  std::unique_ptr<TokenSampler> sampler;
  SampledCompletion out;
  std::int32_t next = 0;       // the token to run next (the last drawn)
};

}  // namespace

std::vector<SampledCompletion> sample_rollouts(model::LlamaModel& model, model::ParamSource& params,
                                               std::span<const std::vector<std::int32_t>> prompts,
                                               const RolloutOptions& options) {
  check_generate_options(options.sampling);
  if (!options.sampling.stop.empty()) fail("sample_rollouts: give stop strings in RolloutOptions::stop, with a decoder");
  std::size_t longest_stop = 0;
  for (const auto& stop : options.stop) {
    if (stop.empty()) fail("sample_rollouts: an empty stop string would end every completion at once");
    longest_stop = std::max(longest_stop, stop.size());
  }
  if (!options.stop.empty() && !options.decode) fail("sample_rollouts: stop strings need a decoder of the drawn ids");
  if (options.group_size < 1 || options.concurrency < 1) {
    fail("sample_rollouts: group size {} and concurrency {} must be at least 1", options.group_size, options.concurrency);
  }
  if (!options.prompt_keys.empty() && options.prompt_keys.size() != prompts.size()) {
    fail("sample_rollouts: {} prompt keys for {} prompts", options.prompt_keys.size(), prompts.size());
  }
  if (!options.prompt_names.empty() && options.prompt_names.size() != prompts.size()) {
    fail("sample_rollouts: {} prompt names for {} prompts", options.prompt_names.size(), prompts.size());
  }
  const auto prompt_name = [&](std::size_t p) {
    return options.prompt_names.empty() ? fmt::format("prompt {}", p) : options.prompt_names[p];
  };
  const auto& config = model.config();
  const std::int64_t vocab = config.vocab_size;
  std::int64_t capacity = 1;
  for (std::size_t p = 0; p < prompts.size(); ++p) {
    const auto length = static_cast<std::int64_t>(prompts[p].size());
    if (length == 0) fail("prompt {} is empty: a completion is predicted from at least one token", p);
    if (length >= config.max_position_embeddings) {
      fail("{} has {} tokens: no room to generate within max_position_embeddings = {}", prompt_name(p), length,
           config.max_position_embeddings);
    }
    check_rollout_window(config, length, options.sampling.max_new_tokens, prompt_name(p), options.max_new_tokens_key,
                         options.window_origin);
    capacity = std::max(capacity, std::min(length + options.sampling.max_new_tokens, config.max_position_embeddings));
  }
  const auto total = static_cast<std::int64_t>(prompts.size()) * options.group_size;
  const auto slots = static_cast<std::size_t>(std::min(options.concurrency, std::max<std::int64_t>(total, 1)));
  std::vector<model::KvCache> caches;
  caches.reserve(slots);
  for (std::size_t s = 0; s < slots; ++s) caches.emplace_back(model.backend(), config, capacity);

  std::vector<SampledCompletion> done(static_cast<std::size_t>(total));
  std::vector<std::size_t> free_slots;
  for (std::size_t s = slots; s-- > 0;) free_slots.push_back(s);
  std::deque<Active> active;
  std::int64_t pending = 0;  // the next (prompt, sample) to start, in order
  std::vector<float> logits;

  // Draws the next token of `a` from `row` (its logits; the repetition penalty applied in place)
  // and says whether the completion ends with it.
  const auto draw = [&](Active& a, std::span<float> row) {
    const auto prompt_length = prompts[static_cast<std::size_t>(a.out.prompt)].size();
    if (const std::size_t bad = first_non_finite(row); bad < row.size()) {
      fail("{} gives a logit that is not finite ({} for token {}) after position {} of {}'s completion {} (its {} "
           "tokens and {} drawn): its activations overflow or its weights are damaged; nothing can be sampled from "
           "it", options.model_name, row[bad], bad, prompt_length + a.out.ids.size() - 1,
           prompt_name(static_cast<std::size_t>(a.out.prompt)), a.out.sample, prompt_length, a.out.ids.size());
    }
    const std::int32_t id = a.sampler->next(row);
    a.sampler->observe(id);
    a.out.ids.push_back(id);
    a.out.logprobs.push_back(static_cast<float>(token_logprob(row, id, options.sampling.temperature)));
    a.next = id;
    const auto& eos = options.eos;
    a.out.eos = std::find(eos.begin(), eos.end(), id) != eos.end();
    if (!a.out.eos && longest_stop > 0) {
      // A stop string of n bytes lies within the last n tokens (each decodes to at least one byte)
      // when the token just drawn completes it; earlier ones were looked for at their own draws.
      const std::size_t window = std::min(a.out.ids.size(), longest_stop + 1);
      const std::string tail = options.decode(std::span<const std::int32_t>(a.out.ids).last(window));
      for (const auto& stop : options.stop) a.out.stopped = a.out.stopped || tail.find(stop) != std::string::npos;
    }
    const auto length = static_cast<std::int64_t>(prompts[static_cast<std::size_t>(a.out.prompt)].size() + a.out.ids.size());
    return a.out.eos || a.out.stopped || static_cast<std::int64_t>(a.out.ids.size()) >= options.sampling.max_new_tokens ||
           length >= caches[a.slot].capacity();
  };
  const auto finish = [&](Active& a) {
    free_slots.push_back(a.slot);
    done[static_cast<std::size_t>(a.out.prompt * options.group_size + a.out.sample)] = std::move(a.out);
  };

  while (pending < total || !active.empty()) {
    if (options.stop_requested && options.stop_requested()) {
      fail("sampling stopped by a stop request after {} of {} completions", pending - static_cast<std::int64_t>(active.size()),
           total);
    }
    // Fill free slots: each new sequence's prompt runs once (prefill) and draws its first token.
    while (pending < total && !free_slots.empty()) {
      Active a;
      a.slot = free_slots.back();
      free_slots.pop_back();
      a.out.prompt = pending / options.group_size;
      a.out.sample = pending % options.group_size;
      ++pending;
      GenerateOptions mine = options.sampling;
      const auto key = options.prompt_keys.empty() ? static_cast<std::uint64_t>(a.out.prompt)
                                                   : options.prompt_keys[static_cast<std::size_t>(a.out.prompt)];
      mine.seed = substream_seed(substream_seed(options.sampling.seed, key),
                                 static_cast<std::uint64_t>(a.out.sample));
      a.sampler = std::make_unique<TokenSampler>(mine, vocab);
      const auto& prompt = prompts[static_cast<std::size_t>(a.out.prompt)];
      for (const std::int32_t id : prompt) a.sampler->observe(id);
      caches[a.slot].clear();
      model.forward_cached(prompt, caches[a.slot], params, logits);
      if (options.sampling.max_new_tokens == 0 || draw(a, logits)) {
        finish(a);
      } else {
        active.push_back(std::move(a));
      }
    }
    if (active.empty()) continue;
    // One token for every active sequence, in one batched forward.
    std::vector<std::int32_t> tokens;
    std::vector<model::KvCache*> batch;
    for (const auto& a : active) {
      tokens.push_back(a.next);
      batch.push_back(&caches[a.slot]);
    }
    model.forward_cached_batch(tokens, batch, params, logits);
    std::deque<Active> still;
    for (std::size_t i = 0; i < active.size(); ++i) {
      const std::span<float> row(logits.data() + i * static_cast<std::size_t>(vocab), static_cast<std::size_t>(vocab));
      if (draw(active[i], row)) {
        finish(active[i]);
      } else {
        still.push_back(std::move(active[i]));
      }
    }
    active = std::move(still);
  }
  return done;
}

}  // namespace odc::train
