#pragma once
// Parameter units: the granularity at which weights are fetched and gradients handed off (the
// FSDP wrapping unit). Unit 0 = token embedding, unit 1..L = decoder layers, unit L+1 = final
// norm + LM head (without the head matrix when embeddings are tied: the head then reads unit 0).
// Each unit is one flat fp32 buffer; its tensors sit back to back at fixed offsets, named as in
// Hugging Face checkpoints.
#include <cstdint>
#include <string>
#include <vector>

#include "odc/core/tensor.h"
#include "odc/model/llama_config.h"

namespace odc::model {

enum class InitKind : std::uint8_t { normal, ones, zeros };

struct TensorSlot {
  std::string name;      // e.g. "model.layers.3.self_attn.q_proj.weight"
  Shape shape;
  std::int64_t offset;   // elements from the start of the unit's flat buffer
  std::int64_t numel;
  InitKind init;
  bool weight_decay;     // matrices decay; norms and biases do not
};

struct UnitLayout {
  std::string name;  // "embedding", "layer.3", "head"
  std::vector<TensorSlot> tensors;
  std::int64_t numel = 0;
  const TensorSlot& find(const std::string& tensor_name) const;
};

std::vector<UnitLayout> build_unit_layouts(const LlamaConfig& config);

// Deterministic initialization of elements [begin, end) of a unit's flat buffer into `out`.
// The value of every element depends only on (seed, tensor name, element index), so any rank can
// initialize just the shard it owns and every world size gets the same model.
void init_unit_range(const UnitLayout& unit, const LlamaConfig& config, std::uint64_t seed,
                     std::int64_t begin, std::int64_t end, float* out);

}  // namespace odc::model
