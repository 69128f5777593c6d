#pragma once
// RunSettings: the keys a training run reads, read once from the effective config, parsed into
// their types and checked, section by section. The trainer, the memory plan and the comm take
// their values from here; no second reading of a key (train.comm is parsed once, the comm's
// options built once, in resolve_run_settings).
//
// Components with keys of their own (MinibatchSource: data.*, Checkpointer: checkpoint.*,
// RunReport: train.metrics_file / train.log_every, Evaluator: data.eval*, the batch schedule)
// still read their keys from the Config they are given.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "odc/backend/backend.h"
#include "odc/core/config.h"
#include "odc/core/dtype.h"
#include "odc/distributed/comm/comm_factory.h"
#include "odc/distributed/shard/sharding.h"
#include "odc/model/recompute.h"

namespace odc::train {

struct ModelSettings {
  std::string checkpoint;           // model.checkpoint: a Hugging Face directory, empty = model.config
  std::string device = "cpu";       // model.device: cpu | cuda
  DType dtype = DType::f32;         // model.dtype
  std::string attention = "auto";   // model.attention
  std::uint64_t seed = 0;           // model.seed

  DeviceKind device_kind() const { return device == "cuda" ? DeviceKind::cuda : DeviceKind::cpu; }
};

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
};

struct DataSettings {
  std::string format;                 // data.format
  std::string tokenizer;              // data.tokenizer (empty: model.checkpoint's)
  bool auto_token_cap = false;        // data.max_tokens_per_microbatch: auto
  std::int64_t max_tokens_per_microbatch = 0;  // the number when not auto (0: the longest sequence)
};

struct CheckpointSettings {
  std::string dir;        // checkpoint.dir (empty: no checkpoints)
  std::string resume;     // checkpoint.resume: auto | never | a checkpoint directory
  std::string export_hf;  // checkpoint.export_hf (empty: no export)
};

struct DebugSettings {
  std::int64_t ranks_per_host = 0;  // debug.ranks_per_host (0: the real hosts)
  std::int64_t slow_rank = -1;      // debug.slow_rank (-1: none)
  double delay_ms = 0.0;            // debug.delay_ms of debug.slow_rank
};

struct RunSettings {
  ModelSettings model;
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
