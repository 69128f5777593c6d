#pragma once
// Rollouts from the policy (GRPO's sampling step): `group_size` completions of every prompt, drawn
// with the model's current weights, many sequences at once: up to `concurrency` sequences decode
// together, one token each per batched forward (LlamaModel::forward_cached_batch: the GEMMs over
// all of them, and per layer one Backend::attention_decode_batch in which each sequence attends to
// its own KV cache); a finished sequence's slot takes the next pending one. Each completion keeps,
// per token, the log-probability of the drawn token under softmax(logits / T) of the full
// vocabulary (T = 1 for greedy): what the clipped objective's "old" policy is (as TRL records it;
// top-k and top-p shape the draw, not this number).
//
// Draws are reproducible per (seed, prompt key, sample): every completion has its own sampler seeded
// from them, so a completion does not depend on which others share its batch (up to the GEMMs'
// summation order over rows, which can flip a near-tie).
#include <cstdint>
#include <functional>
#include <string>
#include <span>
#include <vector>

#include "odc/model/llama_model.h"
#include "odc/train/config/run_settings.h"
#include "odc/train/rollout/sampling.h"

namespace odc::train {

struct RolloutOptions {
  GenerateOptions sampling;             // temperature, top_k, top_p, repetition_penalty, max_new_tokens, seed
  // Completions per prompt (GRPO's G): rl.group_size's default unless the caller says.
  std::int64_t group_size = RlLoopSettings{}.group_size;
  std::int64_t concurrency = 16;        // sequences decoded at once
  std::vector<std::int32_t> eos;        // ids that end a completion (kept as its last token)
  // A completion also ends once its text contains one of these (the token that completed it is
  // kept, as an eos id is); `decode` turns ids into text (the tokenizer's, special tokens kept).
  std::vector<std::string> stop;
  std::function<std::string(std::span<const std::int32_t>)> decode;
  // Per prompt, the number its completions' draws are seeded with (empty: its index), so that a
  // prompt sampled on any rank, among any others, draws the same completions.
  std::vector<std::uint64_t> prompt_keys;
  // For messages: the model ("the model in DIR", "the policy at step 3"), each prompt's origin
  // ("prompts.jsonl:3"; empty: "prompt i"), and what sets max_new_tokens ("rl.max_new_tokens").
  std::string model_name = "the model";
  std::vector<std::string> prompt_names;
  std::string max_new_tokens_key = "max_new_tokens";
  std::string window_origin = "the model's attention_window";
  // Asked before every batched forward (may be empty): true ends sampling with an odc::Error (a
  // single process's stop request; ranks that must agree on stopping do not pass one).
  std::function<bool()> stop_requested;
};

struct SampledCompletion {
  std::int64_t prompt = 0;              // index into the prompts
  std::int64_t sample = 0;              // 0 .. group_size - 1
  std::vector<std::int32_t> ids;        // the completion (an ending eos included)
  std::vector<float> logprobs;          // per id
  bool eos = false;                     // ended by an eos id
  bool stopped = false;                 // ended by a stop string (else by max_new_tokens or the context)
};

// log softmax(logits / T)[token] in double (T = 1 when temperature is 0).
double token_logprob(std::span<const float> logits, std::int32_t token, double temperature);

// A model with an attention window (the original model's sliding window; attention here spans the
// whole sequence, which is the original's only within the window) samples, scores and trains only
// sequences within it: a prompt of `prompt_tokens` plus `max_new_tokens` beyond it is an odc::Error
// naming the prompt (`where`), the window and `window_origin`, and `max_new_tokens_key`. Refused,
// as odc-generate refuses it, rather than cut short: a completion capped at the window would end
// for a reason the original model does not have, and train as if it had.
void check_rollout_window(const model::LlamaConfig& model, std::int64_t prompt_tokens, std::int64_t max_new_tokens,
                          const std::string& where, const std::string& max_new_tokens_key,
                          const std::string& window_origin);

// Completions in (prompt, sample) order. odc::Error for an empty prompt, a prompt that leaves no
// room in the model's context or (check_rollout_window) in its attention window, a logit that is
// not finite (activations that overflow: naming the model, the prompt, the sample and the
// position), or bad options (check_generate_options; stop strings go in RolloutOptions::stop with
// a decoder, not in the sampling options).
std::vector<SampledCompletion> sample_rollouts(model::LlamaModel& model, model::ParamSource& params,
                                               std::span<const std::vector<std::int32_t>> prompts,
                                               const RolloutOptions& options);

}  // namespace odc::train
