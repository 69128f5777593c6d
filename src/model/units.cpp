#include "odc/model/units.h"

#include <algorithm>

#include <fmt/format.h>

#include "odc/core/error.h"
#include "odc/core/hash.h"
#include "odc/core/random.h"

namespace odc::model {

namespace {

void add_tensor(UnitLayout& unit, std::string name, Shape shape, InitKind init, bool decay) {
  const std::int64_t numel = shape_numel(shape);
  unit.tensors.push_back({std::move(name), std::move(shape), unit.numel, numel, init, decay});
  unit.numel += numel;
}

// Standard normal of element `index` of a tensor's stream. Counter-based so that element i gets the
// same value whichever rank initializes it.
double normal_at(std::uint64_t stream, std::int64_t index) {
  const auto counter = static_cast<std::uint64_t>(index) * 2;
  return normal_from_bits(splitmix64(stream ^ splitmix64(counter)), splitmix64(stream ^ splitmix64(counter + 1)));
}

}  // namespace

const TensorSlot& UnitLayout::find(const std::string& tensor_name) const {
  for (const auto& t : tensors) {
    if (t.name == tensor_name) return t;
  }
  fail("unit '{}' has no tensor '{}'", name, tensor_name);
}

std::vector<UnitLayout> build_unit_layouts(const LlamaConfig& config) {
  const std::int64_t c = config.hidden_size;
  const std::int64_t f = config.intermediate_size;
  const std::int64_t q = config.q_dim();
  const std::int64_t kv = config.kv_dim();
  std::vector<UnitLayout> units;

  UnitLayout embedding{"embedding", {}, 0};
  add_tensor(embedding, "model.embed_tokens.weight", {config.vocab_size, c}, InitKind::normal, true);
  units.push_back(std::move(embedding));

  for (int l = 0; l < config.num_hidden_layers; ++l) {
    UnitLayout layer{fmt::format("layer.{}", l), {}, 0};
    const std::string p = fmt::format("model.layers.{}.", l);
    add_tensor(layer, p + "input_layernorm.weight", {c}, InitKind::ones, false);
    add_tensor(layer, p + "self_attn.q_proj.weight", {q, c}, InitKind::normal, true);
    add_tensor(layer, p + "self_attn.k_proj.weight", {kv, c}, InitKind::normal, true);
    add_tensor(layer, p + "self_attn.v_proj.weight", {kv, c}, InitKind::normal, true);
    if (config.attention_bias) {
      add_tensor(layer, p + "self_attn.q_proj.bias", {q}, InitKind::zeros, false);
      add_tensor(layer, p + "self_attn.k_proj.bias", {kv}, InitKind::zeros, false);
      add_tensor(layer, p + "self_attn.v_proj.bias", {kv}, InitKind::zeros, false);
    }
    add_tensor(layer, p + "self_attn.o_proj.weight", {c, q}, InitKind::normal, true);
    if (config.qk_norm) {  // Qwen3: one per-head RMSNorm weight each for q and k
      add_tensor(layer, p + "self_attn.q_norm.weight", {config.head_dim}, InitKind::ones, false);
      add_tensor(layer, p + "self_attn.k_norm.weight", {config.head_dim}, InitKind::ones, false);
    }
    add_tensor(layer, p + "post_attention_layernorm.weight", {c}, InitKind::ones, false);
    add_tensor(layer, p + "mlp.gate_proj.weight", {f, c}, InitKind::normal, true);
    add_tensor(layer, p + "mlp.up_proj.weight", {f, c}, InitKind::normal, true);
    add_tensor(layer, p + "mlp.down_proj.weight", {c, f}, InitKind::normal, true);
    units.push_back(std::move(layer));
  }

  UnitLayout head{"head", {}, 0};
  add_tensor(head, "model.norm.weight", {c}, InitKind::ones, false);
  if (!config.tie_word_embeddings) {
    add_tensor(head, "lm_head.weight", {config.vocab_size, c}, InitKind::normal, true);
  }
  units.push_back(std::move(head));
  return units;
}

void init_unit_range(const UnitLayout& unit, const LlamaConfig& config, std::uint64_t seed,
                     std::int64_t begin, std::int64_t end, float* out) {
  ODC_CHECK(begin >= 0 && begin <= end, "bad init range [{}, {})", begin, end);
  for (const auto& t : unit.tensors) {
    const std::int64_t lo = std::max(begin, t.offset);
    const std::int64_t hi = std::min(end, t.offset + t.numel);
    if (lo >= hi) continue;
    const std::uint64_t stream = splitmix64(seed ^ fnv1a64(t.name));
    for (std::int64_t i = lo; i < hi; ++i) {
      float v = 0.0f;
      switch (t.init) {
        case InitKind::normal:
          v = static_cast<float>(config.initializer_range * normal_at(stream, i - t.offset));
          break;
        case InitKind::ones: v = 1.0f; break;
        case InitKind::zeros: v = 0.0f; break;
      }
      out[i - begin] = v;
    }
  }
  // Padding beyond the last tensor (sharded buffers are padded) stays zero.
  for (std::int64_t i = std::max(begin, unit.numel); i < end; ++i) out[i - begin] = 0.0f;
}

}  // namespace odc::model
