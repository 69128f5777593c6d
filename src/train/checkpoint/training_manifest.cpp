// The training half of a native checkpoint's manifest, to and from its JSON.
#include "odc/train/checkpoint/training_manifest.h"

#include <charconv>
#include <system_error>

#include <fmt/format.h>

#include "odc/core/error.h"

namespace odc::train {

namespace {
template <typename T>
T field(const nlohmann::json& manifest, const char* key, const std::string& where) {
  if (!manifest.contains(key)) fail("checkpoint manifest '{}': missing '{}'", where, key);
  try {
    return manifest.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    fail("checkpoint manifest '{}': '{}' has the wrong type ({})", where, key, manifest.at(key).dump());
  }
}
}  // namespace

std::string fingerprint_hex(std::uint64_t fingerprint) { return fmt::format("{:016x}", fingerprint); }

nlohmann::json TrainingManifest::to_json() const {
  nlohmann::json out = {{"comm", comm}, {"optimizer_steps", optimizer_steps}, {"model_config", model_config}};
  if (sampler) {
    out["sampler"] = {{"seed", sampler->seed}, {"epoch", sampler->epoch}, {"position", sampler->position},
                      {"dataset_size", sampler->dataset_size}, {"shuffle", sampler->shuffle}};
  }
  if (!data_fingerprint.empty()) out["data_fingerprint"] = data_fingerprint;
  if (!dataset.empty()) out["dataset"] = dataset;
  if (!config.empty()) out["config"] = config;
  if (!imported_from.empty()) out["imported_from"] = imported_from;
  if (!identity.run_id.empty()) out.update(identity.to_json());
  if (global_minibatch > 0) out["global_minibatch"] = global_minibatch;
  if (!source_architecture.empty()) out["source"] = {{"architecture", source_architecture}, {"dtype", source_dtype}};
  if (!rollouts_fingerprint.empty()) out["rollouts"] = {{"file", kRolloutsFile}, {"fingerprint", rollouts_fingerprint}};
  for (const auto& [rank, lines] : unwritten_metrics) out["unwritten_metrics"][std::to_string(rank)] = lines;
  return out;
}

TrainingManifest TrainingManifest::from_json(const nlohmann::json& manifest, const std::string& where) {
  TrainingManifest m;
  m.comm = manifest.value("comm", std::string("?"));
  m.optimizer_steps = field<std::int64_t>(manifest, "optimizer_steps", where);
  m.model_config = manifest.value("model_config", nlohmann::json());
  m.imported_from = manifest.value("imported_from", std::string());
  m.data_fingerprint = manifest.value("data_fingerprint", std::string());
  m.dataset = manifest.value("dataset", std::string("?"));
  m.config = manifest.value("config", std::string());
  m.step = field<std::int64_t>(manifest, "step", where);
  m.world_size = field<int>(manifest, "world_size", where);
  m.identity = RunIdentity::from_json(manifest, where);
  m.global_minibatch = manifest.value("global_minibatch", std::int64_t{0});
  if (const auto source = manifest.find("source"); source != manifest.end() && source->is_object()) {
    m.source_architecture = source->value("architecture", std::string());
    m.source_dtype = source->value("dtype", std::string());
  }
  if (const auto rollouts = manifest.find("rollouts"); rollouts != manifest.end()) {
    m.rollouts_fingerprint = field<std::string>(*rollouts, "fingerprint", where);
  }
  if (const auto unwritten = manifest.find("unwritten_metrics"); unwritten != manifest.end()) {
    if (!unwritten->is_object()) {
      fail("checkpoint manifest '{}': 'unwritten_metrics' must map ranks to lines, found {}", where,
           unwritten->type_name());
    }
    for (const auto& item : unwritten->items()) {
      const std::string& rank = item.key();
      int r = -1;
      const auto [end, error] = std::from_chars(rank.data(), rank.data() + rank.size(), r);
      if (error != std::errc() || end != rank.data() + rank.size() || r < 0) {
        fail("checkpoint manifest '{}': 'unwritten_metrics' must be keyed by rank numbers, found '{}'", where, rank);
      }
      m.unwritten_metrics[r] = field<std::vector<std::string>>(*unwritten, rank.c_str(), where);
    }
  }
  if (!m.imported()) {
    const auto s = field<nlohmann::json>(manifest, "sampler", where);
    data::SamplerState state;
    state.seed = field<std::uint64_t>(s, "seed", where);
    state.epoch = field<std::int64_t>(s, "epoch", where);
    state.position = field<std::int64_t>(s, "position", where);
    state.dataset_size = field<std::int64_t>(s, "dataset_size", where);
    state.shuffle = field<bool>(s, "shuffle", where);
    m.sampler = state;
  }
  return m;
}

}  // namespace odc::train
