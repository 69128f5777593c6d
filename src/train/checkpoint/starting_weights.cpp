// The weights a run starts from before any training: a Hugging Face checkpoint's shards
// (model.checkpoint) or the random initialization; what the export keeps of the model's origin.
#include "odc/train/checkpoint/starting_weights.h"

#include <filesystem>
#include <span>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "odc/io/hf_checkpoint.h"

namespace odc::train {
namespace {

// Every rank reads only its shard of every unit (padding included: zeros) of a Hugging Face
// checkpoint into `masters` (the layout's owned elements, units back to back).
void read_base_shards(const io::HfCheckpoint& checkpoint, const distributed::ShardLayout& layout,
                      std::span<float> masters) {
  for (int u = 0; u < layout.num_units(); ++u) {
    checkpoint.read_unit_range(u, layout.shard_begin(u, layout.rank()), layout.unit(u).shard,
                               masters.data() + layout.owned_offset(u));
  }
}

}  // namespace

ModelSource resumed_source(const std::string& base, const TrainingManifest& manifest) {
  ModelSource source;
  if (!manifest.source_architecture.empty()) {
    source.architecture = manifest.source_architecture;
    if (!manifest.source_dtype.empty()) source.dtype = parse_dtype(manifest.source_dtype);
  } else if (!base.empty() && std::filesystem::exists(std::filesystem::path(base) / "config.json")) {
    const io::HfCheckpoint checkpoint(base);
    source = {checkpoint.architecture(), checkpoint.dtype()};
  }
  return source;
}

ModelSource load_base_weights(const std::string& base, distributed::ShardStore& store,
                              const model::LlamaConfig& model) {
  const io::HfCheckpoint checkpoint(base);
  read_base_shards(checkpoint, store.layout(), store.host_masters());
  store.push_to_device();
  spdlog::info("model: loaded {} ({}, {}) from {}", checkpoint.architecture(), dtype_name(checkpoint.dtype()),
               fmt::format("{:.2f}M parameters", static_cast<double>(model.num_parameters()) / 1e6), base);
  return {checkpoint.architecture(), checkpoint.dtype()};
}

std::vector<float> starting_weights(const distributed::ShardLayout& layout, const std::vector<model::UnitLayout>& units,
                                    const model::LlamaConfig& model, std::uint64_t seed, const std::string& base) {
  std::vector<float> weights(static_cast<std::size_t>(layout.owned_elements()));
  if (!base.empty()) {
    read_base_shards(io::HfCheckpoint(base), layout, weights);
    return weights;
  }
  distributed::draw_owned_masters(layout, units, model, seed, weights);
  return weights;
}

}  // namespace odc::train
