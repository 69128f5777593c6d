#pragma once
// Hugging Face checkpoints of the LLaMA family (LlamaForCausalLM, MistralForCausalLM,
// Qwen2ForCausalLM, Qwen3ForCausalLM): a directory with config.json and model.safetensors, or shards listed by
// model.safetensors.index.json. This is the one place that knows how HF names, shapes and dtypes
// map onto the model's units (model/units.h): tensors are named as in HF checkpoints there, so the
// mapping is by name, and every tensor is validated against config.json before any is read.
//
// Architecture differences that matter to the weights:
//   Qwen2   q/k/v biases always (HF's Qwen2Attention hard-codes them; attention_bias is ignored)
//   Mistral never any attention bias
//   sliding windows (Mistral's sliding_window; Qwen2's with use_sliding_window, on the layers
//           from max_window_layers on or as layer_types says) are not implemented: attention spans
//           whole sequences, which is the original model on sequences of up to the window. The
//           window is kept as LlamaConfig::attention_window (training and generation refuse
//           longer sequences) and exported back (Qwen2: max_window_layers 0, every layer slides)
//   Llama   attention_bias adds q/k/v *and* o_proj biases in HF, and the model has no o_proj
//           bias, so attention_bias must be false (a model with q/k/v biases exports as Qwen2)
//   Qwen3   per-head q/k RMSNorms (self_attn.q_norm/k_norm.weight, LlamaConfig::qk_norm) always;
//           attention_bias must be false as for Llama (HF adds an o_proj bias too); head_dim is
//           explicit (128 when absent); sliding-window layers are refused (LlamaConfig::from_json)
//   only Qwen3 has q/k norms, so qk_norm decides Qwen3ForCausalLM and nothing else
// Tied embeddings (tie_word_embeddings) are stored once, as model.embed_tokens.weight.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "odc/core/dtype.h"
#include "odc/io/safetensors_sharded.h"
#include "odc/model/llama_config.h"
#include "odc/model/units.h"

namespace odc::io {

// "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM" (for messages and --help).
std::string supported_hf_architectures();
// The architecture a model exports as when nothing names one: Qwen3ForCausalLM with q/k norms,
// else Qwen2ForCausalLM with attention biases, else MistralForCausalLM with an attention_window,
// else LlamaForCausalLM.
std::string default_hf_architecture(const model::LlamaConfig& config);
// config.json's model_type of a supported architecture ("llama", "mistral", "qwen2", "qwen3"); odc::Error
// naming the architecture and the supported ones otherwise.
std::string hf_model_type(const std::string& architecture);
// Checks that `config` can be stored as `architecture` (see the table above): odc::Error naming
// `where` and the conflict otherwise.
void check_hf_architecture(const std::string& architecture, const model::LlamaConfig& config,
                           const std::string& where);
// The model config of a parsed HF config.json with the architecture's rules applied (see above).
// `where` names the source in errors. The architecture comes from "architectures" (first entry),
// else from "model_type"; `architecture_out` receives it when not null.
model::LlamaConfig hf_config_from_json(const nlohmann::json& config_json, const std::string& where,
                                       std::string* architecture_out = nullptr);

class HfCheckpoint {
 public:
  // Parses DIR/config.json, opens the safetensors (index or single file) and validates every
  // tensor against the config: missing, unexpected (rotary inv_freq buffers and a tied model's
  // lm_head.weight are ignored, as transformers does), shape, dtype (F32, BF16 or F16). All
  // problems are reported together in one odc::Error naming the files and tensors.
  explicit HfCheckpoint(const std::string& dir);

  const model::LlamaConfig& config() const { return config_; }
  const std::string& architecture() const { return architecture_; }
  // The source dtype of the weights (the one holding most parameters, should they be mixed).
  DType dtype() const { return dtype_; }
  const std::string& dir() const { return dir_; }
  const std::vector<model::UnitLayout>& units() const { return units_; }
  const SafetensorsShards& tensors() const { return tensors_; }

  // Fills out[0, count) with elements [offset, offset + count) of unit `unit`'s flat fp32 buffer
  // (layout: model::build_unit_layouts), converted to fp32. Elements past the unit's end (the
  // padding of a sharded buffer) are zero. Each rank loads just its shard this way.
  void read_unit_range(int unit, std::int64_t offset, std::int64_t count, float* out) const;

 private:
  HfCheckpoint(std::string dir, const nlohmann::json& config_json);
  // Throws odc::Error listing every mismatch; returns the dominant dtype.
  DType validate_tensors() const;

  std::string dir_;
  std::string architecture_;
  model::LlamaConfig config_;
  std::vector<model::UnitLayout> units_;
  SafetensorsShards tensors_;
  DType dtype_ = DType::f32;
};

// Writes an HF checkpoint directory from one process (io/hf_export.h: HfDirectoryWriter, the same
// files as a distributed export): config.json ("architectures", "model_type", "torch_dtype" and
// every LlamaConfig field), model.safetensors or shards of whole units of at most max_shard_bytes
// (a larger unit alone) plus model.safetensors.index.json, tensors in `dtype` (f32, bf16 or f16)
// with HF names, tied embeddings once. `full_unit(u, out)` fills unit u's full flat fp32 buffer
// (units.h layout); it is called once per unit, in order, and one unit is held at a time. The
// tokenizer files of `copy_from_dir`, and the staging and crash safety: HfDirectoryWriter.
void write_hf_checkpoint(const std::string& dir, const model::LlamaConfig& config,
                         const std::string& architecture, DType dtype,
                         const std::function<void(int unit, float* out)>& full_unit,
                         std::int64_t max_shard_bytes = 5'000'000'000,
                         const std::string& copy_from_dir = "");

}  // namespace odc::io
