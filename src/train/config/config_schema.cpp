#include "odc/train/config/config_schema.h"

#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "odc/core/error.h"
#include "odc/data/data_keys.h"
#include "odc/distributed/comm/comm_keys.h"
#include "odc/distributed/transport/transport_keys.h"
#include "odc/io/hf_checkpoint.h"
#include "odc/model/model_keys.h"
#include "odc/train/config/batch_schedule.h"
#include "odc/train/config/checkpoint_keys.h"
#include "odc/train/config/plan_keys.h"
#include "odc/train/config/rl_keys.h"
#include "odc/train/config/train_keys.h"

namespace odc::train {

std::vector<TunableSpec> trainer_tunables() {
  // Each key is declared once, beside its user (the *_keys.h headers); this is their order in
  // --dump-config and in Config::canonical(), which checkpoints and ranks compare.
  return {
      keys::model_config.spec(),
      keys::model_checkpoint.spec(),
      keys::model_device.spec(),
      keys::model_dtype.spec(),
      keys::model_seed.spec(),
      keys::model_attention.spec(),
      keys::model_cudnn_workspace_mib.spec(),
      keys::data_train.spec(),
      keys::data_eval.spec(),
      keys::data_eval_max_sequences.spec(),
      keys::data_format.spec(),
      keys::data_tokenizer.spec(),
      keys::data_chat_template.spec(),
      keys::data_extra_fields.spec(),
      keys::data_minibatch_size.spec(),
      keys::data_global_batch_size.spec(),
      keys::data_max_length.spec(),
      keys::data_over_length.spec(),
      keys::data_max_tokens_per_microbatch.spec(),
      keys::data_packing_ratio.spec(),
      keys::data_balance.spec(),
      keys::data_cost_model.spec(),
      keys::data_cost_a.spec(),
      keys::data_cost_b.spec(),
      keys::data_cost_c.spec(),
      keys::data_cost_points.spec(),
      keys::data_shuffle.spec(),
      keys::data_seed.spec(),
      keys::train_comm.spec(),
      keys::train_sharding.spec(),
      keys::train_steps.spec(),
      keys::train_epochs.spec(),
      keys::train_eval_every.spec(),
      keys::train_lr.spec(),
      keys::train_min_lr.spec(),
      keys::train_warmup_steps.spec(),
      keys::train_warmup_ratio.spec(),
      keys::train_warmup_start.spec(),
      keys::train_schedule.spec(),
      keys::train_decay_ratio.spec(),
      keys::train_weight_decay.spec(),
      keys::train_beta1.spec(),
      keys::train_beta2.spec(),
      keys::train_eps.spec(),
      keys::train_grad_clip.spec(),
      keys::train_loss_reduction.spec(),
      keys::train_recompute.spec(),
      keys::train_memory_budget_gib.spec(),
      keys::train_context_parallel.spec(),
      keys::train_context_parallel_degree.spec(),
      keys::train_threads.spec(),
      keys::train_metrics_file.spec(),
      keys::train_trace_file.spec(),
      keys::train_trace_steps.spec(),
      keys::train_peak_flops.spec(),
      keys::train_log_every.spec(),
      keys::train_log_level.spec(),
      keys::comm_chunk_bytes.spec(),
      keys::comm_network_chunk_bytes.spec(),
      keys::comm_max_inflight.spec(),
      keys::comm_direct_load.spec(),
      keys::comm_gather_protocol.spec(),
      keys::comm_deterministic.spec(),
      keys::comm_transport.spec(),
      keys::comm_gather_dtype.spec(),
      keys::comm_timeout_s.spec(),
      keys::checkpoint_dir.spec(),
      keys::checkpoint_every.spec(),
      keys::checkpoint_keep.spec(),
      keys::checkpoint_save_best.spec(),
      keys::checkpoint_accept_manifest_without_checksum.spec(),
      keys::checkpoint_resume.spec(),
      keys::checkpoint_export_hf.spec(),
      keys::checkpoint_export_dtype.spec(),
      keys::checkpoint_export_shard_bytes.spec(),
      keys::train_stop_at_step.spec(),
      keys::train_objective.spec(),
      keys::rl_epsilon.spec(),
      keys::rl_epsilon_high.spec(),
      keys::rl_kl_beta.spec(),
      keys::rl_kl_ratio_weighted.spec(),
      keys::rl_temperature.spec(),
      keys::rl_loss_aggregation.spec(),
      keys::rl_max_completion_length.spec(),
      keys::rl_scale_rewards.spec(),
      keys::rl_entropy.spec(),
      keys::rl_prompts.spec(),
      keys::rl_iterations.spec(),
      keys::rl_prompts_per_iteration.spec(),
      keys::rl_group_size.spec(),
      keys::rl_epochs_per_iteration.spec(),
      keys::rl_max_new_tokens.spec(),
      keys::rl_top_p.spec(),
      keys::rl_top_k.spec(),
      keys::rl_stop.spec(),
      keys::rl_seed.spec(),
      keys::rl_concurrency.spec(),
      keys::rl_verifier.spec(),
      keys::rl_reward_command.spec(),
      keys::rl_reward_timeout_s.spec(),
      keys::rl_chat.spec(),
      keys::debug_checkpoint_delay_ms.spec(),
      keys::debug_checkpoint_delay_rank.spec(),
      keys::debug_host_staging.spec(),
      keys::debug_ranks_per_host.spec(),
      keys::debug_slow_rank.spec(),
      keys::debug_delay_ms.spec(),
  };
}

namespace {

// Relations between keys that each key's own range cannot express, checked as the config loads
// (before any data is read or any training runs).
void check_relations(const Config& config) {
  check_exclusive_keys(config);
  const std::string schedule = keys::train_schedule.read(config);
  const double lr = keys::train_lr.read(config), min_lr = keys::train_min_lr.read(config);
  if (schedule != "constant" && min_lr > lr) {
    fail("train.min_lr ({}) is above train.lr ({}): the {} schedule would raise the learning rate as it decays; "
         "set train.min_lr <= train.lr",
         min_lr, lr, schedule);
  }
  // A key that shapes only something this run does not do would be silently ignored.
  if (schedule != "wsd" && keys::train_decay_ratio.source(config) != "default") {
    fail("train.decay_ratio (from {}) shapes only train.schedule wsd, but the schedule is {}; drop it or set "
         "train.schedule: wsd",
         keys::train_decay_ratio.source(config), schedule);
  }
  if (keys::data_max_length.read(config) == 0 && keys::data_over_length.source(config) != "default") {
    fail("data.over_length (from {}) says what a sequence longer than data.max_length does, but data.max_length is 0 "
         "(no limit); set data.max_length",
         keys::data_over_length.source(config));
  }
  // The objective and its data: rollouts carry what grpo needs, and grpo needs rollouts.
  const bool grpo = keys::train_objective.read(config) == "grpo";
  const bool rollouts = keys::data_format.read(config) == "rollouts";
  const bool online = !keys::rl_prompts.read(config).empty();
  if (online) {
    // The online loop makes its own rollouts: data.train and a run length of steps do not apply.
    for (const char* key : {"data.train", "train.steps", "train.epochs"}) {
      if (config.has(key)) {
        fail("{} (from {}) does not apply to the online RL loop (rl.prompts): it samples its own rollouts, and its "
             "length is rl.iterations; drop {}", key, config.source_of(key), key);
      }
    }
    if (keys::data_format.source(config) != "default" && !rollouts) {
      fail("data.format {} (from {}): the online RL loop (rl.prompts) trains on the rollouts it samples; drop "
           "data.format", keys::data_format.read(config), keys::data_format.source(config));
    }
    if (!keys::rl_reward_command.read(config).empty() && keys::rl_verifier.source(config) != "default") {
      fail("rl.verifier (from {}) and rl.reward_command (from {}) both score completions: give one",
           keys::rl_verifier.source(config), keys::rl_reward_command.source(config));
    }
    const std::string& command = keys::rl_reward_command.read(config);
    if (!command.empty() && command.find_first_not_of(" \t\r\n") == std::string::npos) {
      fail("rl.reward_command (from {}) is blank, a command line that runs nothing: set a command, or leave it "
           "empty (the default) for rl.verifier to score", keys::rl_reward_command.source(config));
    }
    if (keys::rl_reward_command.read(config).empty() && keys::rl_reward_timeout_s.source(config) != "default") {
      fail("rl.reward_timeout_s (from {}) limits rl.reward_command, which is not set (rl.verifier scores the "
           "completions); drop it or set rl.reward_command", keys::rl_reward_timeout_s.source(config));
    }
  } else {
    for (const char* key : {"rl.iterations", "rl.prompts_per_iteration", "rl.group_size", "rl.epochs_per_iteration",
                            "rl.max_new_tokens", "rl.top_p", "rl.top_k", "rl.stop", "rl.seed", "rl.concurrency", "rl.verifier",
                            "rl.reward_command", "rl.reward_timeout_s", "rl.chat"}) {
      if (grpo && config.source_of(key) != "default") {
        fail("{} (from {}) shapes only the online RL loop, and rl.prompts is not set (the rollouts come from "
             "data.train); drop it or set rl.prompts", key, config.source_of(key));
      }
    }
  }
  if (grpo && !rollouts && !online) {
    fail("train.objective grpo trains on rollouts (their sampling log-probabilities and advantages), but "
         "data.format is {}; set data.format: rollouts",
         keys::data_format.read(config));
  }
  if (rollouts && !grpo) {
    fail("data.format rollouts holds RL rollouts, which train.objective {} does not use; set train.objective: grpo",
         keys::train_objective.read(config));
  }
  if (!grpo) {
    for (const auto& spec : config.specs()) {
      const std::string& key = spec.path;
      if (key.rfind("rl.", 0) == 0 && config.has(key) && config.source_of(key) != "default") {
        fail("{} (from {}) shapes only train.objective grpo, but the objective is {}; drop it or set "
             "train.objective: grpo",
             key, config.source_of(key), keys::train_objective.read(config));
      }
    }
  }
  if (grpo && keys::train_loss_reduction.source(config) != "default") {
    fail("train.loss_reduction (from {}) weighs supervised targets; under train.objective grpo the tokens are "
         "weighed by rl.loss_aggregation",
         keys::train_loss_reduction.source(config));
  }
  // The shape itself (fields in range, heads dividing the width): --dump-config and every run
  // see the same verdict. A checkpoint's config.json is checked when it is read
  // (training_model_config).
  if (keys::model_checkpoint.read(config).empty()) (void)model_config_from(config);
}

}  // namespace

Config load_trainer_config(const std::string& config_file, const std::vector<std::string>& assignments) {
  Config config(trainer_tunables());
  if (!config_file.empty()) config.load_yaml_file(config_file);
  config.apply_environment();
  for (const auto& assignment : assignments) config.apply_assignment(assignment);
  check_relations(config);
  return config;
}

namespace {

// The checkpoint's config.json defines the model. A model.config field changed from its default
// (in a config file or by --set) that says otherwise would be silently ignored: an error naming
// each such field and both values. Fields equal to the checkpoint's are accepted.
void check_agrees_with_checkpoint(const Config& config, const model::LlamaConfig& model, const std::string& checkpoint) {
  const nlohmann::json given = yaml_to_json(keys::model_config.read(config));
  const nlohmann::json defaults = yaml_to_json(keys::model_config.default_value());
  const nlohmann::json have = model.to_json();
  std::vector<std::string> conflicts;
  for (const auto& [key, value] : given.items()) {
    if (defaults.contains(key) && defaults.at(key) == value) continue;  // not the user's
    if (!have.contains(key)) {
      conflicts.push_back(fmt::format("{}: {} (not a field of the checkpoint's model)", key, value.dump()));
    } else if (have.at(key) != value) {
      conflicts.push_back(fmt::format("{}: {} (the checkpoint's: {})", key, value.dump(), have.at(key).dump()));
    }
  }
  if (!conflicts.empty()) {
    fail("model.config (from {}) sets {}, but model.checkpoint {} defines the model by its config.json; drop "
         "these from model.config (a new shape: odc-ckpt init --set model.config.*)",
         keys::model_config.source(config), fmt::join(conflicts, ", "), checkpoint);
  }
}

}  // namespace

model::LlamaConfig training_model_config(const Config& config) {
  const std::string checkpoint = keys::model_checkpoint.read(config);
  if (checkpoint.empty()) return model_config_from(config);
  const auto path = std::filesystem::path(checkpoint) / "config.json";
  std::ifstream in(path);
  if (!in) fail("model.checkpoint: cannot read '{}' (a Hugging Face checkpoint directory holds config.json)", path.string());
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("model.checkpoint: '{}' is not valid JSON: {}", path.string(), e.what());
  }
  auto model = io::hf_config_from_json(json, path.string());
  check_agrees_with_checkpoint(config, model, checkpoint);
  return model;
}

}  // namespace odc::train
