#pragma once
// RunSettings: the keys a training run reads, read once from the effective config, parsed into
// their types and checked, section by section. The trainer, the memory plan, the comm, the
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

#include "odc/backend/backend.h"
#include "odc/core/config.h"
#include "odc/core/dtype.h"
#include "odc/distributed/comm/comm_factory.h"
#include "odc/distributed/shard/sharding.h"
#include "odc/kernels/cudnn_ragged.h"
#include "odc/kernels/policy_loss.h"
#include "odc/model/recompute.h"

namespace odc::train {

struct ModelSettings {
  std::string checkpoint;           // model.checkpoint: a Hugging Face directory, empty = model.config
  std::string device = "cpu";       // model.device: cpu | cuda
  DType dtype = DType::f32;         // model.dtype
  std::string attention = "auto";   // model.attention
  std::int64_t cudnn_workspace_mib = kernels::kCudnnWorkspaceLimitMiB;  // model.cudnn_workspace_mib
  std::uint64_t seed = 0;           // model.seed
  std::string config_origin;        // where model.config came from (its attention window's origin)

  DeviceKind device_kind() const { return device == "cuda" ? DeviceKind::cuda : DeviceKind::cpu; }
};

// The largest train.memory_budget_gib (its schema's range): 1 PiB per rank is beyond any machine and
// leaves the plan's byte counts (int64, 8 EiB at most) far from overflowing; a larger budget is
// taken as this one.
constexpr double kMaxMemoryBudgetGib = 1048576.0;
// The smallest positive train.memory_budget_gib (1 MiB; run_settings refuses a smaller one): below
// it the budget's bytes round towards 0, which means "unknown" and checks nothing.
constexpr double kMinMemoryBudgetGib = 1.0 / 1024.0;

struct TrainSettings {
  int threads = 1;                                          // train.threads
  distributed::Sharding sharding = distributed::Sharding::full;  // train.sharding
  model::Recompute recompute = model::Recompute::none;      // train.recompute
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;             // train.beta1, beta2, eps
  double weight_decay = 0.01;                               // train.weight_decay
  double grad_clip = 1.0;                                   // train.grad_clip (0: none)
  double peak_flops = 0.0;                                  // train.peak_flops (0: measured)
  double memory_budget_gib = 0.0;                           // train.memory_budget_gib (0: the device's)
  std::string trace_file;                                   // train.trace_file (empty: no trace)
  std::int64_t trace_steps = 20;                            // train.trace_steps (0: every step)
  std::int64_t stop_at_step = 0;                            // train.stop_at_step (0: train.steps)
  bool sequence_loss = false;                               // train.loss_reduction: sequence
  bool within_epochs = false;                               // train.epochs given
  std::string metrics_file;                                 // train.metrics_file (empty: none)
  std::int64_t log_every = 0;                               // train.log_every
  std::int64_t eval_every = 0;                              // train.eval_every (0: at the end only)
};

struct DataSettings {
  std::string format;                 // data.format
  std::string tokenizer;              // data.tokenizer (empty: model.checkpoint's)
  bool auto_token_cap = false;        // data.max_tokens_per_microbatch: auto
  std::int64_t max_tokens_per_microbatch = 0;  // the number when not auto (0: the longest sequence)
  std::string train;                  // data.train
  std::string balance;                // data.balance (auto | a balancer's name: MinibatchSource resolves it)
  std::int64_t max_length = 0;        // data.max_length (0: no limit)
  std::string over_length;            // data.over_length
  std::string chat_template;          // data.chat_template
  bool ignore_extra_fields = false;   // data.extra_fields: ignore
  std::string eval;                   // data.eval (empty: no evaluation)
  std::int64_t eval_max_sequences = 0;  // data.eval_max_sequences (0: all)
  std::uint64_t seed = 0;             // data.seed
  bool shuffle = true;                // data.shuffle
  std::string seed_origin, shuffle_origin;  // where data.seed and data.shuffle came from
};

struct CheckpointSettings {
  std::string dir;        // checkpoint.dir (empty: no checkpoints)
  std::string resume;     // checkpoint.resume: auto | never | a checkpoint directory
  std::string export_hf;  // checkpoint.export_hf (empty: no export)
  std::int64_t every = 0;  // checkpoint.every
  int keep = 0;            // checkpoint.keep
  bool save_best = false;  // checkpoint.save_best
  bool accept_manifest_without_checksum = false;  // checkpoint.accept_manifest_without_checksum
};

struct DebugSettings {
  std::int64_t ranks_per_host = 0;  // debug.ranks_per_host (0: the real hosts)
  std::int64_t slow_rank = -1;      // debug.slow_rank (-1: none)
  double delay_ms = 0.0;            // debug.delay_ms of debug.slow_rank
  double checkpoint_delay_ms = 0.0;         // debug.checkpoint_delay_ms
  std::int64_t checkpoint_delay_rank = -1;  // debug.checkpoint_delay_rank
};

// train.objective and the rl.* keys (train.objective grpo).
struct ObjectiveSettings {
  bool grpo = false;                        // train.objective: grpo
  kernels::PolicyLossParams policy;         // rl.epsilon, rl.epsilon_high, rl.kl_beta, rl.kl_ratio_weighted
  std::string aggregation = "dapo";         // rl.loss_aggregation: grpo | dapo | dr_grpo
  std::int64_t max_completion_length = 0;  // rl.max_completion_length (0: the data's longest)
  std::string scale_rewards = "group";      // rl.scale_rewards
  bool entropy = true;                      // rl.entropy
};

// The online RL loop (rl.prompts set): every iteration samples rl.group_size completions of
// rl.prompts_per_iteration prompts with the current weights, scores them, and trains
// rl.epochs_per_iteration passes over those rollouts (online_rollouts.h).
struct RlLoopSettings {
  std::string prompts;                     // rl.prompts (empty: offline, rollout records from data.train)
  std::int64_t iterations = 1;             // rl.iterations
  std::int64_t prompts_per_iteration = 8;  // rl.prompts_per_iteration
  std::int64_t group_size = 4;             // rl.group_size
  std::int64_t epochs = 1;                 // rl.epochs_per_iteration
  std::int64_t max_new_tokens = 64;        // rl.max_new_tokens
  double top_p = 1.0;                      // rl.top_p
  std::int64_t top_k = 0;                  // rl.top_k
  std::string stop;                        // rl.stop (empty: none)
  std::uint64_t seed = 0;                  // rl.seed
  std::int64_t concurrency = 16;           // rl.concurrency
  std::string verifier = "exact";          // rl.verifier
  std::string reward_command;              // rl.reward_command (empty: rl.verifier)
  double reward_timeout_s = 300.0;         // rl.reward_timeout_s
  bool chat = false;                       // rl.chat: prompts as user turns of data.chat_template

  bool online() const { return !prompts.empty(); }
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
