#pragma once
// The model's keys (model.*, and train.recompute, which model/recompute.h reads), declared once
// (core/key.h): odc-train's schema lists them, RunSettings takes its defaults from them, and odc-sim
// reads model.config with its own default (model_config_sim, a variant of the same declaration).
#include <cstdint>
#include <string>
#include "odc/core/key.h"
#include "odc/kernels/cudnn_ragged.h"
#include "odc/model/llama_config.h"

#include <nlohmann/json.hpp>

namespace odc::keys {

inline const Key<YAML::Node> model_config{"model.config", MapValue{"{vocab_size: 64, hidden_size: 256, intermediate_size: 688, num_hidden_layers: 6, "
              "num_attention_heads: 8, num_key_value_heads: 4, rms_norm_eps: 1.0e-5, rope_theta: 10000.0, "
              "max_position_embeddings: 4096, tie_word_embeddings: false}"}, "Hugging Face config.json fields of the model to train from random initialization"};
inline const Key<std::string> model_checkpoint{"model.checkpoint", std::string(), "Hugging Face checkpoint directory (config.json + safetensors) to fine-tune; its config.json "
              "replaces model.config (empty = random initialization from model.config)"};
inline const Key<std::string> model_device{"model.device", "cpu", "where the model computes: cpu, or cuda = one GPU per rank (a build with CUDA; rank r uses GPU "
              "local rank mod the GPU count; masters, gradients and AdamW state stay on the GPU in float32)", {"cpu", "cuda"}};
inline const Key<std::string> model_dtype{"model.dtype", "float32", "compute dtype of activations and weights (masters, gradient sums and optimizer state are float32 "
              "always): float32 (cpu), bfloat16 (cuda; on cpu the bf16 mode that rounds where the CUDA path rounds)", {"float32", "bfloat16"}};
inline const Key<std::int64_t> model_seed{"model.seed", 0, "seed of the random initialization (same model on every world size)"};
inline const Key<std::string> model_attention{"model.attention", "auto", "attention kernels on model.device=cuda: cudnn = cuDNN's fused flash attention (ragged packed "
              "sequences, causal, GQA); native = this project's kernel; auto = cudnn where the installed cuDNN "
              "supports the shape, else native with the reason logged (model.device=cpu: always the CPU kernel)", {"auto", "cudnn", "native"}};
inline const Key<std::int64_t> model_cudnn_workspace_mib{"model.cudnn_workspace_mib", kernels::kCudnnWorkspaceLimitMiB, "the most workspace (MiB) one cuDNN attention call may take; a call whose graph needs more (cuDNN "
              "below 9.25 sizes the deterministic backward's scratch over the padded batch: B x heads x S x S x 2 "
              "bytes) runs on the native kernels instead, logged once; the memory plan counts this bound", Range::at_least(1).and_at_most(1 << 30)};
inline const Key<std::string> train_recompute{"train.recompute", "none", "activation recomputation: none = keep every layer's activations for backward; selective = keep "
              "each layer's input, attention output and log-sum-exp, recompute the rest in backward; full = keep "
              "only each layer's input and recompute its whole forward in backward (gradients bitwise equal)", {"none", "selective", "full"}};

// odc-sim's model.config: the same key, another default (the paper's 1.5B model) and doc.
inline const Key<YAML::Node> model_config_sim = model_config.variant(
    MapValue{"{vocab_size: 151936, hidden_size: 1536, intermediate_size: 8960, num_hidden_layers: 28, "
             "num_attention_heads: 12, num_key_value_heads: 2, rms_norm_eps: 1.0e-6, rope_theta: 10000.0, "
             "max_position_embeddings: 131072, tie_word_embeddings: false, attention_bias: true}"},
    "Hugging Face config.json fields of the simulated model (merged key by key over this default: "
    "give every shape field); default DeepSeek-R1-Distill-Qwen-1.5B");

}  // namespace odc::keys

namespace odc::model {

// YAML -> JSON with scalar types inferred the way YAML 1.2 core schema reads them.
nlohmann::json yaml_to_json(const YAML::Node& node);

// model.config as a LlamaConfig (strict: unknown fields are errors naming "model.config.X").
LlamaConfig model_config_from(const Config& config);

}  // namespace odc::model
