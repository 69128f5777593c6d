#pragma once
// Using a trained model on one process: load a Hugging Face checkpoint, measure its loss on a
// dataset (odc-eval), and generate text from a prompt (odc-generate).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "odc/data/dataset.h"
#include "odc/distributed/local_comm.h"
#include "odc/distributed/shard_store.h"
#include "odc/model/llama_model.h"

namespace odc::train {

// A whole model in one process: full fp32 weights behind a LocalComm.
class LoadedModel {
 public:
  // Reads DIR (config.json + safetensors, validated; odc::Error naming the file/tensor).
  // `threads`: compute threads of the CPU backend.
  LoadedModel(const std::string& dir, int threads);
  const model::LlamaConfig& config() const { return model_->config(); }
  const std::string& architecture() const { return architecture_; }
  // eos ids from config.json / generation_config.json ("eos_token_id": int or list), if any.
  const std::vector<std::int32_t>& eos_token_ids() const { return eos_; }

  // Forward of one packed batch; logits [tokens, vocab] when requested.
  model::MicrobatchResult forward(const model::PackedBatch& batch, std::vector<float>* logits);

 private:
  std::string architecture_;
  std::unique_ptr<model::LlamaModel> model_;
  std::unique_ptr<distributed::ShardStore> store_;
  std::unique_ptr<distributed::LocalComm> comm_;
  std::vector<std::int32_t> eos_;
};

struct EvalResult {
  double loss = 0.0;        // mean next-token cross-entropy over target positions (nats)
  double perplexity = 0.0;  // exp(loss)
  double tokens = 0.0;      // target positions scored
  std::int64_t sequences = 0;
};

// Scores every sequence of `dataset` (or the first max_sequences when > 0), packed in order into
// batches of at most max_tokens tokens (a longer sequence gets a batch of its own).
EvalResult evaluate(LoadedModel& model, const data::TokenDataset& dataset, std::int64_t max_tokens,
                    std::int64_t max_sequences = 0);

struct GenerateOptions {
  std::int64_t max_new_tokens = 64;
  double temperature = 0.0;  // 0 = greedy
  double top_p = 1.0;        // nucleus sampling mass (with temperature > 0)
  std::uint64_t seed = 0;
};

// Continues `prompt` (token ids) until an eos id or max_new_tokens; returns the new ids only.
// Each step runs the forward over the whole sequence (no KV cache: fine for the small models this
// trainer's CPU backend targets, quadratic in length).
std::vector<std::int32_t> generate(LoadedModel& model, const std::vector<std::int32_t>& prompt,
                                   const GenerateOptions& options);

}  // namespace odc::train
