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
  options.kind = distributed::parse_comm_kind(config.get_string("train.comm"));
  options.transport.chunk_bytes = config.get_int("comm.chunk_bytes");
  options.transport.network_chunk_bytes = config.get_int("comm.network_chunk_bytes");
  options.transport.max_inflight = static_cast<int>(config.get_int("comm.max_inflight"));
  options.transport.timeout_s = config.get_double("comm.timeout_s");
  options.transport.direct_load = config.get_bool("comm.direct_load");
  options.transport.gather_protocol = distributed::parse_gather_protocol(config.get_string("comm.gather_protocol"));
  options.deterministic = config.get_bool("comm.deterministic");
  options.odc_transport = distributed::parse_odc_transport(config.get_string("comm.transport"));
  options.gather_dtype = distributed::parse_gather_dtype(config.get_string("comm.gather_dtype"));
  options.host_staging = config.get_bool("debug.host_staging");
  return options;
}

ModelSettings read_model(const Config& config) {
  ModelSettings model;
  model.checkpoint = config.get_string("model.checkpoint");
  model.device = config.get_string("model.device");
  model.dtype = parse_dtype(config.get_string("model.dtype"));
  model.attention = config.get_string("model.attention");
  model.cudnn_workspace_mib = config.get_int("model.cudnn_workspace_mib");
  model.seed = static_cast<std::uint64_t>(config.get_int("model.seed"));
  model.config_origin = config.source_of("model.config");
  return model;
}

ObjectiveSettings read_objective(const Config& config) {
  ObjectiveSettings objective;
  objective.grpo = config.get_string("train.objective") == "grpo";
  objective.policy.clip_low = config.get_double("rl.epsilon");
  objective.policy.clip_high = config.has("rl.epsilon_high") ? config.get_double("rl.epsilon_high")
                                                              : objective.policy.clip_low;
  objective.policy.kl_beta = config.get_double("rl.kl_beta");
  objective.policy.kl_ratio_weighted = config.get_bool("rl.kl_ratio_weighted");
  objective.policy.temperature = config.get_double("rl.temperature");
  objective.aggregation = config.get_string("rl.loss_aggregation");
  objective.max_completion_length = config.get_int("rl.max_completion_length");
  objective.scale_rewards = config.get_string("rl.scale_rewards");
  objective.entropy = config.get_bool("rl.entropy");
  return objective;
}

RlLoopSettings read_rl_loop(const Config& config) {
  RlLoopSettings rl;
  rl.prompts = config.get_string("rl.prompts");
  rl.iterations = config.get_int("rl.iterations");
  rl.prompts_per_iteration = config.get_int("rl.prompts_per_iteration");
  rl.group_size = config.get_int("rl.group_size");
  rl.epochs = config.get_int("rl.epochs_per_iteration");
  rl.max_new_tokens = config.get_int("rl.max_new_tokens");
  rl.top_p = config.get_double("rl.top_p");
  rl.top_k = config.get_int("rl.top_k");
  rl.stop = config.get_string("rl.stop");
  rl.seed = static_cast<std::uint64_t>(config.get_int("rl.seed"));
  rl.concurrency = config.get_int("rl.concurrency");
  rl.verifier = config.get_string("rl.verifier");
  rl.reward_command = config.get_string("rl.reward_command");
  rl.reward_timeout_s = config.get_double("rl.reward_timeout_s");
  rl.chat = config.get_bool("rl.chat");
  return rl;
}

TrainSettings read_train(const Config& config) {
  TrainSettings train;
  train.threads = static_cast<int>(config.get_int("train.threads"));
  train.sharding = distributed::parse_sharding(config.get_string("train.sharding"));
  train.recompute = model::parse_recompute(config.get_string("train.recompute"));
  train.beta1 = config.get_double("train.beta1");
  train.beta2 = config.get_double("train.beta2");
  train.eps = config.get_double("train.eps");
  train.weight_decay = config.get_double("train.weight_decay");
  train.grad_clip = config.get_double("train.grad_clip");
  train.peak_flops = config.get_double("train.peak_flops");
  train.memory_budget_gib = config.get_double("train.memory_budget_gib");
  // A positive budget below 1 MiB was as good as none: 1e-10 GiB is 0 bytes, "unknown: nothing checked".
  if (train.memory_budget_gib > 0 && train.memory_budget_gib < kMinMemoryBudgetGib) {
    fail("config key 'train.memory_budget_gib' in {} must be 0 (what the device has) or in [{}, {}] (1 MiB to 1 PiB "
         "per rank), found {}: a budget below 1 MiB would read as none",
         config.source_of("train.memory_budget_gib"), kMinMemoryBudgetGib, kMaxMemoryBudgetGib, train.memory_budget_gib);
  }
  train.trace_file = config.get_string("train.trace_file");
  check_output_pattern("train.trace_file", train.trace_file);
  train.trace_steps = config.get_int("train.trace_steps");
  train.stop_at_step = config.get_int("train.stop_at_step");
  train.sequence_loss = config.get_string("train.loss_reduction") == "sequence";
  train.within_epochs = config.has("train.epochs");
  train.metrics_file = config.get_string("train.metrics_file");
  check_output_pattern("train.metrics_file", train.metrics_file);
  train.log_every = config.get_int("train.log_every");
  train.eval_every = config.get_int("train.eval_every");
  return train;
}

DataSettings read_data(const Config& config) {
  DataSettings data;
  data.format = config.get_string("data.format");
  data.tokenizer = config.get_string("data.tokenizer");
  data.auto_token_cap = config.get_int_word("data.max_tokens_per_microbatch").has_value();
  if (!data.auto_token_cap) data.max_tokens_per_microbatch = config.get_int("data.max_tokens_per_microbatch");
  // Required for a run (checked with the other required keys before the settings are read);
  // --plan-memory and --dump-config read the settings without it.
  data.train = config.has("data.train") ? config.get_string("data.train") : std::string();
  data.balance = config.get_string("data.balance");
  data.max_length = config.get_int("data.max_length");
  data.over_length = config.get_string("data.over_length");
  data.chat_template = config.get_string("data.chat_template");
  data.ignore_extra_fields = config.get_string("data.extra_fields") == "ignore";
  data.eval = config.get_string("data.eval");
  data.eval_max_sequences = config.get_int("data.eval_max_sequences");
  data.seed = static_cast<std::uint64_t>(config.get_int("data.seed"));
  data.shuffle = config.get_bool("data.shuffle");
  data.seed_origin = config.source_of("data.seed");
  data.shuffle_origin = config.source_of("data.shuffle");
  return data;
}

CheckpointSettings read_checkpoint(const Config& config) {
  CheckpointSettings checkpoint;
  checkpoint.dir = config.get_string("checkpoint.dir");
  checkpoint.resume = config.get_string("checkpoint.resume");
  checkpoint.export_hf = config.get_string("checkpoint.export_hf");
  checkpoint.every = config.get_int("checkpoint.every");
  checkpoint.keep = static_cast<int>(config.get_int("checkpoint.keep"));
  checkpoint.save_best = config.get_bool("checkpoint.save_best");
  checkpoint.accept_manifest_without_checksum = config.get_bool("checkpoint.accept_manifest_without_checksum");
  return checkpoint;
}

DebugSettings read_debug(const Config& config) {
  DebugSettings debug;
  debug.ranks_per_host = config.get_int("debug.ranks_per_host");
  debug.slow_rank = config.get_int("debug.slow_rank");
  debug.delay_ms = config.get_double("debug.delay_ms");
  debug.checkpoint_delay_ms = config.get_double("debug.checkpoint_delay_ms");
  debug.checkpoint_delay_rank = config.get_int("debug.checkpoint_delay_rank");
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

}  // namespace odc::train
