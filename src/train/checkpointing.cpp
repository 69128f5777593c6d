#include "odc/train/checkpointing.h"

#include <chrono>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "odc/core/error.h"
#include "odc/core/hash.h"
#include "odc/io/native_checkpoint.h"

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

Checkpointer::Checkpointer(const Config& config, distributed::HostGroup& group)
    : group_(group),
      dir_(config.get_string("checkpoint.dir")),
      every_(config.get_int("checkpoint.every")),
      keep_(static_cast<int>(config.get_int("checkpoint.keep"))),
      resume_(config.get_string("checkpoint.resume")),
      debug_delay_ms_(config.get_double("debug.checkpoint_delay_ms")),
      debug_delay_rank_(config.get_int("debug.checkpoint_delay_rank")) {}

bool Checkpointer::in_use() const { return enabled() || (resume_ != "never" && resume_ != "auto"); }

bool Checkpointer::due(std::int64_t step, std::int64_t last_step) const {
  return enabled() && every_ > 0 && step % every_ == 0 && step < last_step;
}

std::string Checkpointer::resume_path() {
  std::string path;
  if (resume_ == "auto") {
    if (enabled()) path = io::latest_checkpoint(dir_).value_or("");
  } else if (resume_ != "never") {
    path = resume_;
  }
  if (group_.size() > 1) {
    distributed::check_identical_across_ranks(group_, {{"the checkpoint to resume from ('" + path + "')", fnv1a64(path)}});
  }
  return path;
}

void Checkpointer::save(std::int64_t step, const TrainingManifest& manifest, distributed::ShardStore& store) {
  const auto start = std::chrono::steady_clock::now();
  const auto owned = static_cast<std::size_t>(store.layout().owned_elements());
  group_.announce(fmt::format("step {}: checkpoint write", step));
  store.pull_to_host();  // a device store's state, copied to its host staging (a host store: nothing)
  io::write_rank_shards(io::staging_path(dir_, step), group_.rank(),
                        {{store.host_masters().data(), owned}, {store.host_exp_avg().data(), owned},
                         {store.host_exp_avg_sq().data(), owned}});
  if (debug_delay_ms_ > 0 && (debug_delay_rank_ < 0 || debug_delay_rank_ == group_.rank())) {
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(debug_delay_ms_));
  }
  group_.announce(fmt::format("step {}: checkpoint: every rank's shards written?", step));
  group_.barrier("the checkpoint barrier (every rank's shards written)");
  if (group_.is_root()) {
    group_.announce(fmt::format("step {}: checkpoint commit", step));
    const std::string path = io::commit_checkpoint(dir_, step, group_.size(), manifest.to_json(), keep_);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    spdlog::info("checkpoint: step {} saved to {} in {:.2f} s", step, path, seconds);
  }
  group_.announce(fmt::format("step {}: checkpoint committed?", step));
  group_.barrier("the checkpoint barrier (committed)");  // nobody moves on (or exits) before the commit
}

TrainingManifest Checkpointer::load(const std::string& path, distributed::ShardStore& store,
                                    const nlohmann::json& model_config, std::uint64_t data_fingerprint,
                                    const std::string& dataset) {
  const nlohmann::json json = io::read_manifest(path);
  TrainingManifest manifest = TrainingManifest::from_json(json, path);
  if (manifest.world_size != group_.size()) {
    fail("checkpoint '{}' was written by {} ranks, this run has {}: native checkpoints hold per-rank shards; "
         "export it to a Hugging Face directory and start from model.checkpoint to change the world size",
         path, manifest.world_size, group_.size());
  }
  if (manifest.model_config != model_config) {
    fail("checkpoint '{}' holds a different model (model_config: {}) than this run's ({})", path,
         manifest.model_config.dump(), model_config.dump());
  }
  // A checkpoint imported from a Hugging Face directory (odc-ckpt import) has weights only: the
  // data starts from the beginning.
  if (!manifest.imported() && manifest.data_fingerprint != fingerprint_hex(data_fingerprint)) {
    fail("checkpoint '{}' was trained on different data ({}) than {}: resuming would not continue the same "
         "run (use checkpoint.resume: never to start over)", path, manifest.dataset, dataset);
  }
  const auto owned = static_cast<std::size_t>(store.layout().owned_elements());
  io::read_rank_shards(path, json, group_.rank(),
                       {{store.host_masters().data(), owned}, {store.host_exp_avg().data(), owned},
                        {store.host_exp_avg_sq().data(), owned}});
  store.push_to_device();
  spdlog::info("resumed from {} (step {}, written with comm {})", path, manifest.step, manifest.comm);
  return manifest;
}

}  // namespace odc::train
