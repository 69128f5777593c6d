#include "odc/train/config/run_settings.h"

#include <thread>

#include "odc/backend/backend_factory.h"
#include "odc/core/error.h"
#include "odc/core/thread_limit.h"
#include "odc/train/config/output_pattern.h"

namespace odc::train {

namespace {

// The comm's options: train.comm, comm.* and debug.host_staging, each read here and nowhere else.
distributed::CommOptions read_comm_options(const Config& config) {
  distributed::CommOptions options;
  options.kind = distributed::parse_comm_kind(keys::train_comm.read(config));
  options.transport.chunk_bytes = keys::comm_chunk_bytes.read(config);
  options.transport.network_chunk_bytes = keys::comm_network_chunk_bytes.read(config);
  options.transport.max_inflight = static_cast<int>(keys::comm_max_inflight.read(config));
  options.transport.timeout_s = keys::comm_timeout_s.read(config);
  options.transport.direct_load = keys::comm_direct_load.read(config);
  options.transport.gather_protocol = distributed::parse_gather_protocol(keys::comm_gather_protocol.read(config));
  options.deterministic = keys::comm_deterministic.read(config);
  options.odc_transport = distributed::parse_odc_transport(keys::comm_transport.read(config));
  options.gather_dtype = distributed::parse_gather_dtype(keys::comm_gather_dtype.read(config));
  options.host_staging = keys::debug_host_staging.read(config);
  return options;
}

ModelSettings read_model(const Config& config) {
  ModelSettings model;
  model.checkpoint = keys::model_checkpoint.read(config);
  model.device = keys::model_device.read(config);
  model.dtype = parse_dtype(keys::model_dtype.read(config));
  model.attention = keys::model_attention.read(config);
  model.cudnn_workspace_mib = keys::model_cudnn_workspace_mib.read(config);
  model.seed = static_cast<std::uint64_t>(keys::model_seed.read(config));
  model.config_origin = keys::model_config.source(config);
  return model;
}

ObjectiveSettings read_objective(const Config& config) {
  ObjectiveSettings objective;
  objective.grpo = keys::train_objective.read(config) == "grpo";
  objective.policy.clip_low = keys::rl_epsilon.read(config);
  objective.policy.clip_high = keys::rl_epsilon_high.is_set(config) ? keys::rl_epsilon_high.read(config)
                                                              : objective.policy.clip_low;
  objective.policy.kl_beta = keys::rl_kl_beta.read(config);
  objective.policy.kl_ratio_weighted = keys::rl_kl_ratio_weighted.read(config);
  objective.policy.temperature = keys::rl_temperature.read(config);
  objective.aggregation = keys::rl_loss_aggregation.read(config);
  objective.max_completion_length = keys::rl_max_completion_length.read(config);
  objective.scale_rewards = keys::rl_scale_rewards.read(config);
  objective.entropy = keys::rl_entropy.read(config);
  return objective;
}

RlLoopSettings read_rl_loop(const Config& config) {
  RlLoopSettings rl;
  rl.prompts = keys::rl_prompts.read(config);
  rl.iterations = keys::rl_iterations.read(config);
  rl.prompts_per_iteration = keys::rl_prompts_per_iteration.read(config);
  rl.group_size = keys::rl_group_size.read(config);
  rl.epochs = keys::rl_epochs_per_iteration.read(config);
  rl.max_new_tokens = keys::rl_max_new_tokens.read(config);
  rl.top_p = keys::rl_top_p.read(config);
  rl.top_k = keys::rl_top_k.read(config);
  rl.stop = keys::rl_stop.read(config);
  rl.seed = static_cast<std::uint64_t>(keys::rl_seed.read(config));
  rl.concurrency = keys::rl_concurrency.read(config);
  rl.verifier = keys::rl_verifier.read(config);
  rl.reward_command = keys::rl_reward_command.read(config);
  rl.reward_timeout_s = keys::rl_reward_timeout_s.read(config);
  rl.chat = keys::rl_chat.read(config);
  return rl;
}

TrainSettings read_train(const Config& config) {
  TrainSettings train;
  train.threads = static_cast<int>(keys::train_threads.read(config));
  train.sharding = distributed::parse_sharding(keys::train_sharding.read(config));
  train.recompute = model::parse_recompute(keys::train_recompute.read(config));
  train.context_parallel = keys::train_context_parallel.read(config) == "auto";
  train.context_degree = keys::train_context_parallel_degree.read(config);
  train.beta1 = keys::train_beta1.read(config);
  train.beta2 = keys::train_beta2.read(config);
  train.eps = keys::train_eps.read(config);
  train.weight_decay = keys::train_weight_decay.read(config);
  train.grad_clip = keys::train_grad_clip.read(config);
  train.peak_flops = keys::train_peak_flops.read(config);
  train.memory_budget_gib = keys::train_memory_budget_gib.read(config);
  // A positive budget below 1 MiB was as good as none: 1e-10 GiB is 0 bytes, "unknown: nothing checked".
  if (train.memory_budget_gib > 0 && train.memory_budget_gib < kMinMemoryBudgetGib) {
    fail("config key 'train.memory_budget_gib' in {} must be 0 (what the device has) or in [{}, {}] (1 MiB to 1 PiB "
         "per rank), found {}: a budget below 1 MiB would read as none",
         keys::train_memory_budget_gib.source(config), kMinMemoryBudgetGib, kMaxMemoryBudgetGib, train.memory_budget_gib);
  }
  train.trace_file = keys::train_trace_file.read(config);
  check_output_pattern("train.trace_file", train.trace_file);
  train.trace_steps = keys::train_trace_steps.read(config);
  train.stop_at_step = keys::train_stop_at_step.read(config);
  train.sequence_loss = keys::train_loss_reduction.read(config) == "sequence";
  train.within_epochs = keys::train_epochs.is_set(config);
  train.metrics_file = keys::train_metrics_file.read(config);
  check_output_pattern("train.metrics_file", train.metrics_file);
  train.log_every = keys::train_log_every.read(config);
  train.eval_every = keys::train_eval_every.read(config);
  return train;
}

DataSettings read_data(const Config& config) {
  DataSettings data;
  data.format = keys::data_format.read(config);
  data.tokenizer = keys::data_tokenizer.read(config);
  data.auto_token_cap = keys::data_max_tokens_per_microbatch.read_word(config).has_value();
  if (!data.auto_token_cap) data.max_tokens_per_microbatch = keys::data_max_tokens_per_microbatch.read(config);
  // Required for a run (checked with the other required keys before the settings are read);
  // --plan-memory and --dump-config read the settings without it.
  data.train = keys::data_train.is_set(config) ? keys::data_train.read(config) : std::string();
  data.balance = keys::data_balance.read(config);
  data.max_length = keys::data_max_length.read(config);
  data.over_length = keys::data_over_length.read(config);
  data.chat_template = keys::data_chat_template.read(config);
  data.ignore_extra_fields = keys::data_extra_fields.read(config) == "ignore";
  data.eval = keys::data_eval.read(config);
  data.eval_max_sequences = keys::data_eval_max_sequences.read(config);
  data.seed = static_cast<std::uint64_t>(keys::data_seed.read(config));
  data.shuffle = keys::data_shuffle.read(config);
  data.seed_origin = keys::data_seed.source(config);
  data.shuffle_origin = keys::data_shuffle.source(config);
  return data;
}

CheckpointSettings read_checkpoint(const Config& config) {
  CheckpointSettings checkpoint;
  checkpoint.dir = keys::checkpoint_dir.read(config);
  checkpoint.resume = keys::checkpoint_resume.read(config);
  checkpoint.export_hf = keys::checkpoint_export_hf.read(config);
  checkpoint.every = keys::checkpoint_every.read(config);
  checkpoint.keep = static_cast<int>(keys::checkpoint_keep.read(config));
  checkpoint.save_best = keys::checkpoint_save_best.read(config);
  checkpoint.accept_manifest_without_checksum = keys::checkpoint_accept_manifest_without_checksum.read(config);
  return checkpoint;
}

DebugSettings read_debug(const Config& config) {
  DebugSettings debug;
  debug.ranks_per_host = keys::debug_ranks_per_host.read(config);
  debug.slow_rank = keys::debug_slow_rank.read(config);
  debug.delay_ms = keys::debug_delay_ms.read(config);
  debug.checkpoint_delay_ms = keys::debug_checkpoint_delay_ms.read(config);
  debug.checkpoint_delay_rank = keys::debug_checkpoint_delay_rank.read(config);
  return debug;
}

}  // namespace

RunSettings resolve_run_settings(const Config& config, bool for_run) {
  RunSettings settings;
  settings.train = read_train(config);
  settings.objective = read_objective(config);
  settings.rl = read_rl_loop(config);
  if (for_run && settings.train.threads > max_compute_threads()) {
    fail("train.threads = {} is more than 4 x the {} hardware threads of this machine (at most {}): that many "
         "threads would only slow training down",
         settings.train.threads, std::thread::hardware_concurrency(), max_compute_threads());
  }
  settings.model = read_model(config);
  settings.comm = read_comm_options(config);
  settings.data = read_data(config);
  settings.checkpoint = read_checkpoint(config);
  settings.debug = read_debug(config);
  return settings;
}

std::unique_ptr<backend::Backend> training_backend(const RunSettings& settings, int local_rank) {
  const ModelSettings& model = settings.model;
  if (settings.comm.gather_dtype == distributed::GatherDtype::bf16 && model.dtype != DType::bf16) {
    fail("comm.gather_dtype bf16 rounds the gathered weights to bf16, but model.dtype {} computes with them unrounded: "
         "set model.dtype: bfloat16, or comm.gather_dtype: fp32",
         dtype_name(model.dtype));
  }
  return backend::make_backend(model.device, model.dtype, settings.train.threads, local_rank, model.attention,
                               model.cudnn_workspace_mib);
}

std::vector<std::int64_t> RlLoopSettings::prompt_positions(int rank, int world) const {
  std::vector<std::int64_t> positions;
  for (std::int64_t j = rank; j < prompts_per_iteration; j += world) positions.push_back(j);
  return positions;
}

std::int64_t RlLoopSettings::most_completions_per_rank(int world) const {
  return static_cast<std::int64_t>(prompt_positions(0, world).size()) * group_size;
}

}  // namespace odc::train
