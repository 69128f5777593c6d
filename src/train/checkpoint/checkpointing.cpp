#include "odc/train/checkpoint/checkpointing.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "odc/core/atomic_file.h"
#include "odc/core/error.h"
#include "odc/core/hash.h"
#include "odc/io/native_checkpoint.h"
#include "odc/io/native_reshard.h"
#include "odc/model/llama_config.h"
#include "odc/train/checkpoint/starting_weights.h"
#include "odc/train/config/config_diff.h"

namespace odc::train {

namespace {
// Rank 0 runs `decide` and broadcasts its result (or its error, which then every rank throws): the
// decisions about the shared directory are made once, and no rank is left waiting for another
// that failed.
std::string decided_by_root(distributed::HostGroup& group, const std::string& what,
                            const std::function<std::string()>& decide) {
  nlohmann::json message = nlohmann::json::object();
  if (group.is_root()) {
    try {
      message["result"] = decide();
    } catch (const Error& e) {
      message["error"] = e.what();
    }
  }
  std::string text = message.dump();
  if (group.size() > 1) group.broadcast(text, what);
  message = nlohmann::json::parse(text);
  if (message.contains("error")) throw Error(message["error"].get<std::string>());
  return message.value("result", std::string());
}
// checkpoint.resume: auto — the newest checkpoint of `dir`, which must not be damaged: passing over
// a damaged newest one would continue from an older step without a word, and later write that
// step again. The error says what is wrong and where on its first line, what to do on its second
// (the setting that resumes the previous good one), then why and any other damaged ones.
std::string newest_good_checkpoint(const std::string& dir) {
  const auto all = io::scan_checkpoints(dir);
  std::vector<const io::CheckpointStatus*> newer_damaged;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if (it->damage.empty()) break;
    newer_damaged.push_back(&*it);
  }
  if (newer_damaged.empty()) return all.empty() ? std::string() : all.back().path;
  std::string others;
  for (std::size_t i = 1; i < newer_damaged.size(); ++i) {
    others += fmt::format("\n  also damaged: {}: {}", newer_damaged[i]->path, newer_damaged[i]->damage);
  }
  const std::size_t good = all.size() - newer_damaged.size();
  const std::string newest = newer_damaged.front()->path;
  const std::string& what = newer_damaged.front()->damage;
  if (good == 0) {
    fail("checkpoint.dir '{}': the newest checkpoint {} is damaged: {}\n"
         "  there is no good checkpoint before it: move the damaged step directories out of checkpoint.dir (or set "
         "another checkpoint.dir) to start a new run; checkpoint.resume: auto does not start over on its own{}",
         dir, newest, what, others);
  }
  const std::string previous = all[good - 1].path;
  fail("checkpoint.dir '{}': the newest checkpoint {} is damaged: {}\n"
       "  to resume from the previous good checkpoint: --set checkpoint.resume={} (the damaged {} then moved to "
       "{}/retired/), or repair or replace {} and run again\n"
       "  checkpoint.resume: auto does not pass over a damaged checkpoint: the run would go on from an earlier step "
       "and later write that step again{}",
       dir, newest, what, previous, newer_damaged.size() == 1 ? "one is" : "ones are", dir, newest, others);
}

}  // namespace

Checkpointer::Checkpointer(const RunSettings& settings, const Config& config, distributed::HostGroup& group)
    : group_(group),
      config_(config),
      shard_rank_(group.rank()),
      shard_world_(group.size()),
      dir_(settings.checkpoint.dir),
      every_(settings.checkpoint.every),
      keep_(settings.checkpoint.keep),
      resume_(settings.checkpoint.resume),
      data_(settings.data),
      debug_delay_ms_(settings.debug.checkpoint_delay_ms),
      debug_delay_rank_(settings.debug.checkpoint_delay_rank),
      save_best_(settings.checkpoint.save_best),
      accept_manifest_without_checksum_(settings.checkpoint.accept_manifest_without_checksum) {
  if (!enabled()) return;
  decided_by_root(group_, "the checkpoint directory's lock", [&] {
    lock_.emplace(dir_, io::this_process(""));
    if (!lock_->locked()) {
      spdlog::warn("checkpoint.dir '{}': {}; a second job on this directory would not be detected", dir_,
                   lock_->unlocked_reason());
    }
    return std::string();
  });
}

bool Checkpointer::in_use() const { return enabled() || (resume_ != "never" && resume_ != "auto"); }

bool Checkpointer::due(std::int64_t step, std::int64_t last_step) const {
  return enabled() && every_ > 0 && step % every_ == 0 && step < last_step;
}

const Checkpointer::RunStart& Checkpointer::begin_run() {
  ODC_CHECK(!start_, "Checkpointer::begin_run called twice");
  if (group_.size() > 1) {
    // Every rank must mean the same thing (rank 0 alone then looks at the directory).
    distributed::check_identical_across_ranks(
        group_, {{"the checkpoint to resume from ('" + resume_ + "')", fnv1a64(resume_)},
                 {"checkpoint.dir ('" + dir_ + "')", fnv1a64(dir_)}});
  }
  const std::string decided = decided_by_root(group_, "the run's identity and resume point", [&] {
    std::string path;
    if (resume_ == "auto") {
      if (enabled()) path = newest_good_checkpoint(dir_);
    } else if (resume_ != "never") {
      path = resume_;
    }
    RunIdentity identity = fresh_identity();
    std::int64_t step = 0;
    if (!path.empty()) {
      nlohmann::json manifest;
      try {
        manifest = io::read_manifest(path);
      } catch (const Error& e) {
        // checkpoint.resume names a damaged checkpoint: say which one to go back to, before the detail.
        if (!std::filesystem::is_directory(path)) throw;
        const auto previous = io::previous_checkpoint(path);
        fail("checkpoint.resume '{}': the checkpoint is damaged\n  {}\n  what is wrong: {}", path,
             previous ? fmt::format("to resume from the previous good checkpoint instead: --set checkpoint.resume={}",
                                    *previous)
                      : std::string("there is no earlier good checkpoint next to it to resume from"),
             e.what());
      }
      // Read with a warning (rank 0 decides: one warning) where the key accepts it.
      io::check_manifest_checksum_present(path, manifest,
                                          {.accept = accept_manifest_without_checksum_,
                                           .name = "checkpoint.accept_manifest_without_checksum",
                                           .how = "--set checkpoint.accept_manifest_without_checksum=true",
                                           .use = "resume",
                                           .note = "the next checkpoint will have one",
                                           .hint = io::previous_checkpoint_hint(path)});
      identity = resumed_identity(path, manifest);
      step = manifest.at("step").get<std::int64_t>();
    }
    nlohmann::json out = {{"path", path}, {"identity", identity.to_json()}, {"abandoned", nlohmann::json::array()}};
    if (enabled()) {
      const DirectoryPlan plan = plan_directory(dir_, resume_, path, step, identity);
      if (!plan.error.empty()) fail("{}", plan.error);
      out["abandoned"] = plan.abandoned;
      out["retire_name"] = plan.retire_name;
      out["damaged"] = plan.damaged;
      out["damage"] = plan.damage;
      out["damaged_name"] = plan.damaged_name;
      for (const auto& warning : plan.warnings) spdlog::warn("checkpoint.dir '{}': {}", dir_, warning);
      if (lock_) lock_->update(io::this_process(identity.run_id));
      if (const auto best = read_best_checkpoint(dir_, identity.run_id, step)) out["best"] = best->to_json();
    }
    if (path.empty()) {
      spdlog::info("run {}: a fresh start{}", identity.run_id, enabled() ? " in checkpoint.dir " + dir_ : "");
    } else {
      spdlog::info("run {}: resuming from {} (step {}; this job is segment {})", identity.run_id, path, step,
                   identity.segment);
    }
    return out.dump();
  });
  const auto json = nlohmann::json::parse(decided);
  RunStart start;
  start.resume_path = json["path"].get<std::string>();
  start.identity = RunIdentity::from_json(json["identity"], "the run's identity");
  start.abandoned = json["abandoned"].get<std::vector<std::string>>();
  start.retire_name = json.value("retire_name", std::string());
  start.damaged = json.value("damaged", std::vector<std::string>());
  start.damage = json.value("damage", std::vector<std::string>());
  start.damaged_name = json.value("damaged_name", std::string());
  if (json.contains("best")) best_ = BestCheckpoint::from_json(json["best"], best_record_path(dir_));
  start_ = std::move(start);
  return *start_;
}

void Checkpointer::retire_abandoned() {
  ODC_CHECK(start_.has_value(), "Checkpointer::retire_abandoned before begin_run");
  if (!start_->damaged.empty()) {
    decided_by_root(group_, "the retirement of damaged checkpoints", [&] {
      const std::string where = io::retire_checkpoints(dir_, start_->damaged, start_->damaged_name);
      for (std::size_t i = 0; i < start_->damaged.size(); ++i) {
        spdlog::warn("damaged checkpoint {} moved to {} (not deleted; never searched): this run resumed from {} as "
                     "checkpoint.resume says, and would write its step again. What was wrong: {}",
                     start_->damaged[i], where, start_->resume_path.empty() ? "nothing (a fresh start)" : start_->resume_path,
                     start_->damage[i]);
      }
      return std::string();
    });
    start_->damaged.clear();
  }
  if (start_->abandoned.empty()) return;
  decided_by_root(group_, "the retirement of an abandoned branch", [&] {
    std::string names;
    for (const auto& path : start_->abandoned) names += (names.empty() ? "" : ", ") + std::filesystem::path(path).filename().string();
    const std::string where = io::retire_checkpoints(dir_, start_->abandoned, start_->retire_name);
    spdlog::warn("rollback: run {} resumed from {}; its later checkpoints ({}) are an abandoned branch, moved to {} "
                 "(not deleted); auto-resume and checkpoint.keep follow the new branch",
                 start_->identity.run_id, start_->resume_path, names, where);
    return std::string();
  });
  start_->abandoned.clear();
}

const RunIdentity& Checkpointer::identity() const {
  ODC_CHECK(start_.has_value(), "Checkpointer::identity before begin_run");
  return start_->identity;
}

void Checkpointer::set_shards(int shard_rank, int shard_world, bool writes) {
  ODC_CHECK(shard_world >= 1 && shard_rank >= 0 && shard_rank < shard_world, "checkpoint shards: bad rank/world");
  shard_rank_ = shard_rank;
  shard_world_ = shard_world;
  writes_shards_ = writes;
}

void Checkpointer::save(std::int64_t step, const TrainingManifest& manifest, distributed::ShardStore& store,
                        const std::vector<std::pair<std::string, std::string>>& files) {
  ODC_CHECK(start_.has_value(), "Checkpointer::save before begin_run");
  const auto start = std::chrono::steady_clock::now();
  const auto owned = static_cast<std::size_t>(store.layout().owned_elements());
  group_.announce(fmt::format("step {}: checkpoint write", step));
  store.pull_to_host();  // a device store's state, copied to its host staging (a host store: nothing)
  if (writes_shards_) {
    io::write_rank_shards(io::staging_path(dir_, step), shard_rank_,
                          {{store.host_masters().data(), owned}, {store.host_exp_avg().data(), owned},
                           {store.host_exp_avg_sq().data(), owned}});
  }
  if (debug_delay_ms_ > 0 && (debug_delay_rank_ < 0 || debug_delay_rank_ == group_.rank())) {
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(debug_delay_ms_));
  }
  group_.announce(fmt::format("step {}: checkpoint: every rank's shards written?", step));
  group_.barrier("the checkpoint barrier (every rank's shards written)");
  if (group_.is_root()) {
    group_.announce(fmt::format("step {}: checkpoint commit", step));
    for (const auto& [name, content] : files) {
      write_file_atomically((std::filesystem::path(io::staging_path(dir_, step)) / name).string(), content);
    }
    TrainingManifest ours = manifest;
    ours.identity = identity();
    const std::string path = io::commit_checkpoint(dir_, step, shard_world_, ours.to_json(), keep_,
                                                   best_ ? std::optional(best_->step) : std::nullopt);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    spdlog::info("checkpoint: step {} saved to {} in {:.2f} s", step, path, seconds);
  }
  group_.announce(fmt::format("step {}: checkpoint committed?", step));
  group_.barrier("the checkpoint barrier (committed)");  // nobody moves on (or exits) before the commit
}

void Checkpointer::record_best(BestCheckpoint best) {
  ODC_CHECK(start_.has_value() && enabled(), "Checkpointer::record_best without begin_run or checkpoint.dir");
  best.run_id = identity().run_id;
  if (group_.is_root()) {
    write_best_checkpoint(dir_, best);
    spdlog::info("checkpoint: step {} is the best so far (eval loss {:.6f}{}), recorded in {}", best.step,
                 best.eval_loss, best_ ? fmt::format(", was {:.6f} at step {}", best_->eval_loss, best_->step) : "",
                 best_record_path(dir_));
  }
  best_ = std::move(best);
}

void Checkpointer::report_config_changes(const std::string& path, const nlohmann::json& json,
                                         const TrainingManifest& manifest) const {
  if (manifest.config.empty()) return;  // an import, or a manifest without the config
  std::vector<std::string> skipped;
  std::vector<ConfigChange> changes;
  try {
    changes = config_changes(manifest.config, config_, &skipped);
  } catch (const Error& e) {
    spdlog::warn("resume: the config saved in {} cannot be compared with this run's: {}", path, e.what());
    return;
  }
  if (!changes.empty()) {
    spdlog::warn("resume: {} key(s) differ from the config saved in {}: {}", changes.size(), path,
                 describe_changes(changes));
  }
  if (!skipped.empty()) {
    spdlog::info("resume: {} key(s) of the config saved in {} are not keys of this version and were not compared: {}",
                 skipped.size(), path, fmt::join(skipped, ", "));
  }
}

TrainingManifest Checkpointer::load(const std::string& path, distributed::ShardStore& store,
                                    const nlohmann::json& model_config, std::uint64_t data_fingerprint,
                                    const std::string& dataset, std::int64_t global_minibatch) {
  const nlohmann::json json = io::read_manifest(path);
  TrainingManifest manifest = TrainingManifest::from_json(json, path);
  if (group_.is_root()) report_config_changes(path, json, manifest);
  if (manifest.model_config != model_config) {
    fail("checkpoint '{}' holds a different model (model_config: {}) than this run's ({})", path,
         manifest.model_config.dump(), model_config.dump());
  }
  // A checkpoint imported from a Hugging Face directory (odc-ckpt import) has weights only: the
  // data starts from the beginning.
  if (!manifest.imported() && manifest.data_fingerprint != fingerprint_hex(data_fingerprint)) {
    fail("checkpoint '{}' was trained on different data ({}) than {}: resuming would not continue the same "
         "run (to start over: a new checkpoint.dir with checkpoint.resume: never)", path, manifest.dataset, dataset);
  }
  const int world = group_.size();
  // The sampler's position counts sequences: the same steps draw the same sequences only with the
  // same number per step (the per-rank share may change with the world size).
  if (!manifest.imported() && manifest.global_minibatch > 0 && global_minibatch > 0 &&
      manifest.global_minibatch != global_minibatch) {
    const std::int64_t g = manifest.global_minibatch;
    fail("checkpoint '{}' was trained with {} sequences per step (data.minibatch_size {} x {} ranks), this run "
         "draws {} (data.minibatch_size {} x {} ranks): the steps after the resume would not draw the same "
         "sequences; {}",
         path, g, g / std::max(1, manifest.world_size), manifest.world_size, global_minibatch, global_minibatch / world,
         world,
         g % world == 0 ? fmt::format("set data.minibatch_size={} to continue it on {} ranks", g / world, world)
                        : fmt::format("no data.minibatch_size gives {} sequences on {} ranks; choose a world size "
                                      "that divides {}", g, world, g));
  }
  // The sampler's order is (data.seed, epoch); its restore would only say "seed differs".
  if (manifest.sampler) {
    const std::uint64_t seed = data_.seed;
    if (manifest.sampler->seed != seed) {
      fail("checkpoint '{}' was trained with data.seed {}, this run sets data.seed {} ({}): the data order after the "
           "resume would not continue the run's; set data.seed={} to resume it (a new seed is a new run: another "
           "checkpoint.dir)", path, manifest.sampler->seed, seed, data_.seed_origin, manifest.sampler->seed);
    }
    if (manifest.sampler->shuffle != data_.shuffle) {
      fail("checkpoint '{}' was trained with data.shuffle {}, this run sets data.shuffle {} ({}): the data order after "
           "the resume would not continue the run's; set data.shuffle={} to resume it", path,
           manifest.sampler->shuffle, !manifest.sampler->shuffle, data_.shuffle_origin,
           manifest.sampler->shuffle);
    }
  }
  // The online RL loop's rollouts of a mid-iteration checkpoint are part of it: damaged, the
  // checkpoint is, and the hint is a damaged shard's.
  if (!manifest.rollouts_fingerprint.empty()) {
    const std::string file = (std::filesystem::path(path) / kRolloutsFile).string();
    std::ifstream in(file, std::ios::binary);
    if (!in) {
      fail("checkpoint '{}': {} is missing (the rollouts of the online RL iteration it was saved in, recorded in its "
           "manifest; they cannot be sampled again){}", path, file, io::previous_checkpoint_hint(path));
    }
    const std::string records{std::istreambuf_iterator<char>(in), {}};
    if (fingerprint_hex(fnv1a64(records)) != manifest.rollouts_fingerprint) {
      fail("checkpoint '{}': {} does not match the fingerprint its manifest recorded ({}): it was changed or damaged "
           "after the checkpoint was saved{}", path, file, manifest.rollouts_fingerprint,
           io::previous_checkpoint_hint(path));
    }
  }
  const auto owned = static_cast<std::size_t>(store.layout().owned_elements());
  const io::RankShardsOut out{store.host_masters().subspan(0, owned), store.host_exp_avg().subspan(0, owned),
                              store.host_exp_avg_sq().subspan(0, owned)};
  if (manifest.world_size == shard_world_) {
    io::read_rank_shards(path, json, shard_rank_, out);
  } else {
    const auto units =
        model::build_unit_layouts(model::LlamaConfig::from_json(manifest.model_config, path + "/manifest.json", false));
    io::read_resharded_shards(path, json, units, store.layout(), out);
  }
  store.push_to_device();
  return manifest;
}

InitialState Checkpointer::initial_state(distributed::ShardStore& store, const std::string& base,
                                         const RunDescription& run) {
  ODC_CHECK(start_, "Checkpointer::initial_state called before begin_run");
  const std::string& resume = start_->resume_path;
  // The store draws random weights exactly when nothing will be loaded into it.
  ODC_CHECK(store.masters_drawn() == (resume.empty() && base.empty()),
            "initial state: the store's masters were {}drawn from the random initialization, but {}",
            store.masters_drawn() ? "" : "not ",
            resume.empty() && base.empty() ? "nothing is loaded" : "a checkpoint fills them");
  InitialState state;
  if (resume.empty()) {
    if (!base.empty()) state.source = load_base_weights(base, store, run.model);
    return state;
  }
  state.resumed = load(resume, store, run.model.to_json(), run.data_fingerprint, run.dataset, run.global_minibatch);
  state.source = resumed_source(base, *state.resumed);
  const TrainingManifest& m = *state.resumed;
  state.resumed_note = m.world_size != shard_world_
                           ? fmt::format("resumed from {} (step {}, written with comm {} by {} ranks, resharded onto {})",
                                         resume, m.step, m.comm, m.world_size, shard_world_)
                           : fmt::format("resumed from {} (step {}, written with comm {})", resume, m.step, m.comm);
  return state;
}

}  // namespace odc::train
