#pragma once
// RunSettings: the keys a training run reads, read once from the effective config, parsed into
// their types and checked, section by section. A field a key sets takes its default from the key's
// declaration (the *_keys.h headers; tests/structure/check_keys.py refuses a literal there), so a
// default-constructed RunSettings is the settings of the default config. The trainer, the memory plan, the comm, the
// checkpointer, the evaluator and the run report take their values from here; no second reading
// of a key (train.comm is parsed once, the comm's options built once, in resolve_run_settings).
// Where an error must say where a value came from, its origin is kept beside it
// (Config::source_of: "default", the file, --set, an environment variable).
//
// Still read from the Config they are given: the cost model, token cap and batch schedule keys
// (data/data_config.h, batch_schedule.h: their messages say which of two exclusive keys was set
// and where), and the checkpointer's diff of this job's config against a checkpoint's (every key,
// by design).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "odc/backend/backend.h"
#include "odc/core/config.h"
#include "odc/core/dtype.h"
#include "odc/distributed/comm/comm_factory.h"
#include "odc/distributed/shard/sharding.h"
#include "odc/kernels/cudnn_ragged.h"
#include "odc/kernels/policy_loss.h"
#include "odc/data/data_keys.h"
#include "odc/distributed/comm/comm_keys.h"
#include "odc/model/model_keys.h"
#include "odc/model/recompute.h"
#include "odc/train/config/checkpoint_keys.h"
#include "odc/train/config/plan_keys.h"
#include "odc/train/config/rl_keys.h"
#include "odc/train/config/train_keys.h"

namespace odc::train {

struct ModelSettings {
  std::string checkpoint;           // model.checkpoint: a Hugging Face directory, empty = model.config
  std::string device = keys::model_device.default_value();  // model.device: cpu | cuda
  DType dtype = parse_dtype(keys::model_dtype.default_value());  // model.dtype
  std::string attention = keys::model_attention.default_value();  // model.attention
  std::int64_t cudnn_workspace_mib = keys::model_cudnn_workspace_mib.default_value();  // model.cudnn_workspace_mib
  std::uint64_t seed = static_cast<std::uint64_t>(keys::model_seed.default_value());  // model.seed
  std::string config_origin;        // where model.config came from (its attention window's origin)

  DeviceKind device_kind() const { return device == "cuda" ? DeviceKind::cuda : DeviceKind::cpu; }
};

struct TrainSettings {
  int threads = static_cast<int>(keys::train_threads.default_value());  // train.threads
  distributed::Sharding sharding = distributed::parse_sharding(keys::train_sharding.default_value());  // train.sharding
  model::Recompute recompute = model::parse_recompute(keys::train_recompute.default_value());  // train.recompute
  double beta1 = keys::train_beta1.default_value();                // train.beta1
  double beta2 = keys::train_beta2.default_value();                // train.beta2
  double eps = keys::train_eps.default_value();                    // train.eps
  double weight_decay = keys::train_weight_decay.default_value();  // train.weight_decay
  double grad_clip = keys::train_grad_clip.default_value();        // train.grad_clip (0: none)
  double peak_flops = keys::train_peak_flops.default_value();      // train.peak_flops (0: measured)
  double memory_budget_gib = keys::train_memory_budget_gib.default_value();  // train.memory_budget_gib (0: the device's)
  std::string trace_file = keys::train_trace_file.default_value();  // train.trace_file (empty: no trace)
  std::int64_t trace_steps = keys::train_trace_steps.default_value();  // train.trace_steps (0: every step)
  std::int64_t stop_at_step = keys::train_stop_at_step.default_value();  // train.stop_at_step (0: train.steps)
  bool sequence_loss = keys::train_loss_reduction.default_value() == "sequence";  // train.loss_reduction: sequence
  bool within_epochs = false;                               // whether train.epochs is given (it has no default)
  std::string metrics_file = keys::train_metrics_file.default_value();  // train.metrics_file (empty: none)
  std::int64_t log_every = keys::train_log_every.default_value();  // train.log_every
  std::int64_t eval_every = keys::train_eval_every.default_value();  // train.eval_every (0: at the end only)
  bool context_parallel = keys::train_context_parallel.default_value() == "auto";  // train.context_parallel
  std::int64_t context_degree = keys::train_context_parallel_degree.default_value();  // train.context_parallel_degree
};

struct DataSettings {
  std::string format = keys::data_format.default_value();        // data.format
  std::string tokenizer = keys::data_tokenizer.default_value();  // data.tokenizer (empty: model.checkpoint's)
  bool auto_token_cap = false;  // whether data.max_tokens_per_microbatch is auto (its default is a number)
  // data.max_tokens_per_microbatch: the number when not auto (0: the longest sequence)
  std::int64_t max_tokens_per_microbatch = keys::data_max_tokens_per_microbatch.default_value();
  std::string train;  // data.train: required, no default (empty in the settings of --plan-memory, --dump-config)
  std::string balance = keys::data_balance.default_value();  // data.balance (auto | a balancer's name: MinibatchSource resolves it)
  std::int64_t max_length = keys::data_max_length.default_value();  // data.max_length (0: no limit)
  std::string over_length = keys::data_over_length.default_value();  // data.over_length
  std::string chat_template = keys::data_chat_template.default_value();  // data.chat_template
  bool ignore_extra_fields = keys::data_extra_fields.default_value() == "ignore";  // data.extra_fields: ignore
  std::string eval = keys::data_eval.default_value();  // data.eval (empty: no evaluation)
  std::int64_t eval_max_sequences = keys::data_eval_max_sequences.default_value();  // data.eval_max_sequences (0: all)
  std::uint64_t seed = static_cast<std::uint64_t>(keys::data_seed.default_value());  // data.seed
  bool shuffle = keys::data_shuffle.default_value();  // data.shuffle
  std::string seed_origin, shuffle_origin;  // where data.seed and data.shuffle came from
};

struct CheckpointSettings {
  std::string dir = keys::checkpoint_dir.default_value();  // checkpoint.dir (empty: no checkpoints)
  std::string resume = keys::checkpoint_resume.default_value();  // checkpoint.resume: auto | never | a checkpoint directory
  std::string export_hf = keys::checkpoint_export_hf.default_value();  // checkpoint.export_hf (empty: no export)
  std::int64_t every = keys::checkpoint_every.default_value();  // checkpoint.every
  int keep = static_cast<int>(keys::checkpoint_keep.default_value());  // checkpoint.keep
  bool save_best = keys::checkpoint_save_best.default_value();  // checkpoint.save_best
  // checkpoint.accept_manifest_without_checksum
  bool accept_manifest_without_checksum = keys::checkpoint_accept_manifest_without_checksum.default_value();
};

struct DebugSettings {
  std::int64_t ranks_per_host = keys::debug_ranks_per_host.default_value();  // debug.ranks_per_host (0: the real hosts)
  std::int64_t slow_rank = keys::debug_slow_rank.default_value();  // debug.slow_rank (-1: none)
  double delay_ms = keys::debug_delay_ms.default_value();  // debug.delay_ms of debug.slow_rank
  double checkpoint_delay_ms = keys::debug_checkpoint_delay_ms.default_value();  // debug.checkpoint_delay_ms
  std::int64_t checkpoint_delay_rank = keys::debug_checkpoint_delay_rank.default_value();  // debug.checkpoint_delay_rank
};

// train.objective and the rl.* keys (train.objective grpo).
struct ObjectiveSettings {
  bool grpo = keys::train_objective.default_value() == "grpo";  // train.objective: grpo
  // rl.epsilon, rl.epsilon_high, rl.kl_beta, rl.kl_ratio_weighted, rl.temperature
  kernels::PolicyLossParams policy = keys::default_policy_loss();
  std::string aggregation = keys::rl_loss_aggregation.default_value();  // rl.loss_aggregation: grpo | dapo | dr_grpo
  std::int64_t max_completion_length = keys::rl_max_completion_length.default_value();  // rl.max_completion_length (0: the data's longest)
  std::string scale_rewards = keys::rl_scale_rewards.default_value();  // rl.scale_rewards
  bool entropy = keys::rl_entropy.default_value();  // rl.entropy
};

// The online RL loop (rl.prompts set): every iteration samples rl.group_size completions of
// rl.prompts_per_iteration prompts with the current weights, scores them, and trains
// rl.epochs_per_iteration passes over those rollouts (online_rollouts.h).
struct RlLoopSettings {
  std::string prompts = keys::rl_prompts.default_value();  // rl.prompts (empty: offline, rollout records from data.train)
  std::int64_t iterations = keys::rl_iterations.default_value();  // rl.iterations
  std::int64_t prompts_per_iteration = keys::rl_prompts_per_iteration.default_value();  // rl.prompts_per_iteration
  std::int64_t group_size = keys::rl_group_size.default_value();  // rl.group_size
  std::int64_t epochs = keys::rl_epochs_per_iteration.default_value();  // rl.epochs_per_iteration
  std::int64_t max_new_tokens = keys::rl_max_new_tokens.default_value();  // rl.max_new_tokens
  double top_p = keys::rl_top_p.default_value();  // rl.top_p
  std::int64_t top_k = keys::rl_top_k.default_value();  // rl.top_k
  std::string stop = keys::rl_stop.default_value();  // rl.stop (empty: none)
  std::uint64_t seed = static_cast<std::uint64_t>(keys::rl_seed.default_value());  // rl.seed
  std::int64_t concurrency = keys::rl_concurrency.default_value();  // rl.concurrency
  std::string verifier = keys::rl_verifier.default_value();  // rl.verifier
  std::string reward_command = keys::rl_reward_command.default_value();  // rl.reward_command (empty: rl.verifier)
  double reward_timeout_s = keys::rl_reward_timeout_s.default_value();  // rl.reward_timeout_s
  bool chat = keys::rl_chat.default_value();  // rl.chat: prompts as user turns of data.chat_template

  bool online() const { return !prompts.empty(); }
  // The deal of an iteration's prompts over `world` ranks, written once for the loop and the memory
  // plan: rank r samples the prompts at positions r, r + world, ... of the iteration's draw.
  std::vector<std::int64_t> prompt_positions(int rank, int world) const;
  // The most completions one rank samples in an iteration (rank 0's share of the deal).
  std::int64_t most_completions_per_rank(int world) const;
};

struct RunSettings {
  ModelSettings model;
  ObjectiveSettings objective;
  RlLoopSettings rl;
  TrainSettings train;
  DataSettings data;
  // train.comm, comm.* and debug.host_staging: the options the comm is made with.
  distributed::CommOptions comm;
  CheckpointSettings checkpoint;
  DebugSettings debug;
};

// Reads every key of RunSettings once; a value that names nothing (a comm, a sharding, a dtype)
// is the same odc::Error as ever. With `for_run`, also what a run needs of this machine:
// train.threads at most 4 x its hardware threads (the memory plan of --plan-memory and
// --dump-config, made for another machine, passes false).
RunSettings resolve_run_settings(const Config& config, bool for_run = true);

// The model's backend (backend::make_backend) for model.device, model.dtype, train.threads and
// model.attention; `local_rank` (this rank among its host's ranks) picks the GPU of model.device
// cuda. A comm.gather_dtype bf16 with fp32 compute is an odc::Error (the weights would be rounded).
std::unique_ptr<backend::Backend> training_backend(const RunSettings& settings, int local_rank);

}  // namespace odc::train
