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
#include "odc/train/sampling.h"

namespace odc::train {

struct RolloutOptions {
  GenerateOptions sampling;             // temperature, top_k, top_p, repetition_penalty, max_new_tokens, seed
  std::int64_t group_size = 4;          // completions per prompt (GRPO's G)
  std::int64_t concurrency = 16;        // sequences decoded at once
  std::vector<std::int32_t> eos;        // ids that end a completion (kept as its last token)
  // A completion also ends once its text contains one of these (the token that completed it is
  // kept, as an eos id is); `decode` turns ids into text (the tokenizer's, special tokens kept).
  std::vector<std::string> stop;
  std::function<std::string(std::span<const std::int32_t>)> decode;
  // Per prompt, the number its completions' draws are seeded with (empty: its index), so that a
  // prompt sampled on any rank, among any others, draws the same completions.
  std::vector<std::uint64_t> prompt_keys;
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

// Completions in (prompt, sample) order. odc::Error for an empty prompt, a prompt that leaves no
// room in the model's context, or bad options (check_generate_options; stop strings go in
// RolloutOptions::stop with a decoder, not in the sampling options).
std::vector<SampledCompletion> sample_rollouts(model::LlamaModel& model, model::ParamSource& params,
                                               std::span<const std::vector<std::int32_t>> prompts,
                                               const RolloutOptions& options);

}  // namespace odc::train
