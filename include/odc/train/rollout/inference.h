#pragma once
// Using a trained model on one process: load a Hugging Face checkpoint, measure its loss on a
// dataset (odc-eval), and generate text from a prompt (odc-generate).
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "odc/data/dataset.h"
#include "odc/distributed/comm/local_comm.h"
#include "odc/distributed/shard/shard_store.h"
#include "odc/model/kv_cache.h"
#include "odc/model/llama_model.h"
#include "odc/train/rollout/sampling.h"

namespace odc::train {

// The eos ids of a Hugging Face directory: "eos_token_id" (an int or a list) of config.json, which
// generation_config.json overrides; empty when neither says.
std::vector<std::int32_t> eos_token_ids(const std::string& dir);

// A whole model in one process: full fp32 weights behind a LocalComm, in a weights-only store
// (StoreContents::weights: no gradients, no optimizer moments) that the load fills.
class LoadedModel {
 public:
  // Reads DIR (config.json + safetensors, validated; odc::Error naming the file/tensor).
  // `threads`: compute threads of the CPU backend.
  LoadedModel(const std::string& dir, int threads);
  const model::LlamaConfig& config() const { return model_->config(); }
  const std::string& architecture() const { return architecture_; }
  const std::string& dir() const { return dir_; }
  // eos ids from config.json / generation_config.json ("eos_token_id": int or list), if any.
  const std::vector<std::int32_t>& eos_token_ids() const { return eos_; }
  // bos_token_id of config.json / generation_config.json, if any: what Hugging Face's generate
  // starts from when there are no input ids (an empty prompt).
  std::optional<std::int32_t> bos_token_id() const { return bos_; }

  // Forward of one packed batch; logits [tokens, vocab] when requested.
  model::MicrobatchResult forward(const model::PackedBatch& batch, std::vector<float>* logits);
  // A KV cache of `capacity` positions in the model's backend memory, and the incremental forward
  // over it (model::LlamaModel::forward_cached): `logits` gets the prediction after the last token.
  model::KvCache make_cache(std::int64_t capacity);
  void forward_cached(std::span<const std::int32_t> tokens, model::KvCache& cache, std::vector<float>& logits);
  // The model and its weights, for what runs the model itself (sample_rollouts).
  model::LlamaModel& model() { return *model_; }
  model::ParamSource& params() { return *comm_; }
  // The weights' store (weights only: no gradients or moments).
  const distributed::ShardStore& store() const { return *store_; }

 private:
  std::string dir_;
  std::string architecture_;
  std::unique_ptr<model::LlamaModel> model_;
  std::unique_ptr<distributed::ShardStore> store_;
  std::unique_ptr<distributed::LocalComm> comm_;
  std::vector<std::int32_t> eos_;
  std::optional<std::int32_t> bos_;
};

struct EvalResult {
  double loss = 0.0;        // mean next-token cross-entropy over target positions (nats)
  double perplexity = 0.0;  // exp(loss)
  double tokens = 0.0;      // target positions scored
  std::int64_t sequences = 0;
  std::int64_t over_context = 0;  // sequences longer than max_position_embeddings (scored, with a warning)
};

// Scores every sequence of `dataset` (or the first max_sequences when > 0), packed in order into
// batches of at most max_tokens tokens (a longer sequence gets a batch of its own). A model with an
// attention window (a sliding window of the original model) refuses a longer sequence; sequences
// longer than max_position_embeddings are scored with a warning naming the first (and counted).
EvalResult evaluate(LoadedModel& model, const data::TokenDataset& dataset, std::int64_t max_tokens,
                    std::int64_t max_sequences = 0);

// Why generation ended.
enum class FinishReason { eos, length, stop, context };
const char* finish_reason_name(FinishReason reason);  // "eos", "length", "stop", "context"

struct GenerateResult {
  // Every new id, including an eos id that ended generation and the ids that produced a stop string.
  std::vector<std::int32_t> ids;
  // With a decoder: the decoded new ids, cut before the first stop string found (else empty).
  std::string text;
  FinishReason finish = FinishReason::length;
};

// Text of a run of token ids (the tokenizer's decode).
using TokenDecoder = std::function<std::string(const std::vector<std::int32_t>&)>;

// Continues `prompt` (token ids) until an eos id, max_new_tokens, a stop string or the model's
// context (max_position_embeddings) ends it; returns the new ids (and, with `decode`, their text).
// A model with an attention window (config().attention_window, the original model's sliding
// window) refuses a prompt whose length plus max_new_tokens exceeds it.
// With the KV cache (options.use_cache, the default) the prompt runs once and each new token once
// more (work linear in the length per token); without it every step runs the whole sequence again.
// The options are checked first (check_generate_options); stop strings need `decode`.
GenerateResult generate(LoadedModel& model, const std::vector<std::int32_t>& prompt, const GenerateOptions& options,
                        const TokenDecoder& decode = {});

}  // namespace odc::train
