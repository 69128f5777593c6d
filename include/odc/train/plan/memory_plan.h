#pragma once
// The memory model: what one rank holds at its peak, item by item, predicted from the model's
// shape, the world size, the device, the comm and the microbatch's token count — before anything
// is allocated. odc-train logs it at start-up, prints it with --plan-memory, derives
// data.max_tokens_per_microbatch: auto from it and refuses a run whose plan exceeds the rank's
// memory budget (train.memory_budget_gib, else what the device has).
//
// Every item names the allocation it predicts (the component and its sizing rule), so a wrong
// prediction points at its cause. Items live in the compute device's memory or in host memory; on
// the CPU both are the process's resident set. Tests compare the prediction with the measured
// peak: the CPU resident set (tests/cli/test_memory_plan.sh, within 10%), the GPU allocator's
// peak in the GPU check.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "odc/core/config.h"
#include "odc/core/dtype.h"
#include "odc/core/planned_memory.h"
#include "odc/distributed/comm/comm.h"
#include "odc/distributed/comm/comm_factory.h"
#include "odc/model/llama_config.h"
#include "odc/distributed/transport/context/context_exchange.h"
#include "odc/model/recompute.h"
#include "odc/train/config/run_settings.h"

namespace odc::train {

struct MemoryInputs {
  model::LlamaConfig model;
  int world = 1;                    // ranks sharing the shards (the shard world)
  DeviceKind device = DeviceKind::cpu;
  DType compute = DType::f32;       // model.dtype
  model::Recompute recompute = model::parse_recompute(keys::train_recompute.default_value());  // train.recompute
  std::int64_t tokens = 0;          // the microbatch's token count (the cap)
  distributed::CommKind comm = distributed::CommKind::odc;
  distributed::TransportKind transport = distributed::TransportKind::automatic;
  distributed::GatherDtype gather = distributed::GatherDtype::f32;
  bool deterministic = false;       // comm.deterministic
  bool host_staging = false;        // debug.host_staging
  bool launched_with_mpi = true;    // (automatic transport) a group without MPI takes ipc
  int hosts = 1;                    // hosts the shard group spans (automatic transport: several take ucx)
  std::int64_t chunk_bytes = 0;     // comm.chunk_bytes
  int max_inflight = 0;             // comm.max_inflight
  std::string sharding = "full";    // train.sharding: hybrid and hpz add what the plan names but does not size
  bool direct_load = true;          // comm.direct_load
  // The attention may run on cuDNN (model.device cuda with model.attention cudnn, or auto once
  // auto takes cuDNN: kernels::kAutoTakesCudnn; the device's facts are not known here, so auto is
  // counted as cuDNN): its workspace is an item, at most the bound (model.cudnn_workspace_mib).
  bool cudnn_attention = false;
  std::int64_t cudnn_workspace_limit = 0;  // bytes
  int ranks_on_host = 1;            // ranks of this host (shared-memory transports map their peers' regions)
  // One rank: the backend keeps every unit's compute copy through the step (Backend::
  // keep_weight_copies), or makes them at every acquire; settle_memory_plan drops it when only
  // that makes the plan fit.
  bool keep_weight_copies = true;
  // The online RL loop (rl.prompts): while sampling, every unit's full fp32 weights
  // (model::WeightSnapshot) and `rollout_sequences` KV caches of `rollout_length` positions;
  // with rl.kl_beta, this rank's shard of the reference in host memory. 0 sequences: no loop.
  std::int64_t rollout_sequences = 0;
  std::int64_t rollout_length = 0;
  bool rollout_reference = false;
  // checkpoint.export_hf: the streamed export's buffers at the end of the run (model_export.h).
  bool export_hf = false;
  // Context parallelism (model/context_split.h): the whole sequences' rows of the largest split
  // microbatch (0: nothing is split). A member's share of it is within `tokens` (its activations
  // are those of the cap); the split adds its key segments' keys, values and gradients, the
  // gradient copies it receives, and the exchange's own region.
  std::int64_t context_rows = 0;
  double comm_timeout_s = 0.0;  // comm.timeout_s (the exchange's options)
};

// One item: its name, sizing rule, bytes and memory (planned_memory.h); the comm's and the
// backend's as those parts report them (comm_buffers.h, backend_workspaces.h).
using MemoryItem = PlannedBytes;

struct MemoryPlan {
  MemoryInputs inputs;
  std::vector<MemoryItem> items;
  std::vector<std::string> notes;  // what the plan does not size

  std::int64_t device_bytes() const;  // items in the compute device's memory
  std::int64_t host_bytes() const;    // items in host memory only (staging; 0 on the CPU)
  std::int64_t pooled_bytes() const;  // device items through the backend's allocator
  // The peak the budget is checked against: the device's items (on the CPU: everything).
  std::int64_t peak_bytes() const;
  std::int64_t activation_bytes() const;  // the "activations" item (0 without one)
  // A table for people: one line per item, the totals and the notes.
  std::string table() const;
  nlohmann::json to_json() const;
};

MemoryPlan plan_memory(const MemoryInputs& inputs);

// The context exchange a run whose split microbatches hold up to `whole_rows` rows of whole
// sequences builds (the trainer) and plans (below): its region holds the most a member exposes
// (model::max_key_rows rows of keys or values at the activation size); `timeout_s`: comm.timeout_s
// (0: the options' default).
distributed::ContextExchangeOptions context_exchange_options(const model::LlamaConfig& model, DType activation,
                                                             std::int64_t whole_rows, double timeout_s);

// The largest token count (a multiple of `granule`, at least `granule`) whose plan fits in
// `budget_bytes`; 0 when not even `granule` tokens fit.
std::int64_t max_tokens_that_fit(MemoryInputs inputs, std::int64_t budget_bytes, std::int64_t granule = 256);

// The inputs as the run's settings (run_settings.h: the comm's options among them) describe them
// on `world` ranks; `tokens` is the cap to plan for.
MemoryInputs memory_inputs(const RunSettings& settings, const model::LlamaConfig& model, int world,
                           std::int64_t tokens, bool launched_with_mpi);

// One rank's budget: train.memory_budget_gib when set, else `capacity_bytes` (this rank's share of
// what the device has: Backend::memory_capacity) less a margin (kBudgetMargin) for what no item
// sizes (fragmentation, the runtime's own allocations); 0 (unknown) when neither is known.
constexpr double kBudgetMargin = 0.05;
std::int64_t memory_budget(const RunSettings& settings, std::int64_t capacity_bytes);

// The refusal: odc::Error with the plan's table when the plan exceeds the budget (nothing when
// budget_bytes <= 0, i.e. unknown), naming what would make it fit.
void check_fits(const MemoryPlan& plan, std::int64_t budget_bytes, std::string_view budget_origin);

// odc-train's plan at start-up, before the data is read: the inputs (without the token count),
// this rank's budget and where it comes from, and the cap data.max_tokens_per_microbatch: auto
// resolves to (0 unless auto). odc::Error when auto finds not even 256 tokens fit.
struct RunMemory {
  MemoryInputs inputs;
  std::int64_t budget = 0;
  std::string budget_origin;
  std::int64_t auto_token_cap = 0;
};
// `capacity_bytes`: this rank's share (Backend::memory_capacity); `ranks_sharing`: the ranks of this host.
// `rollout_length`: the online RL loop's longest sequence (prompt + rl.max_new_tokens; 0 bounds it
// by the model's context). `hosts`: the hosts the shard group spans (distributed::comm_hosts; 1
// for hybrid sharding's host groups), which the comm's choice follows.
RunMemory plan_run_memory(const RunSettings& settings, const model::LlamaConfig& model, int shard_world,
                          std::int64_t capacity_bytes, int ranks_sharing, bool launched_with_mpi,
                          std::int64_t rollout_length = 0, int hosts = 1);

// The run's plan at its token cap: refused (check_fits) when over the budget, else returned (one
// rank: without kept weight copies when only that fits; inputs.keep_weight_copies says), and with
// `log` one line saying what it needs of what budget.
MemoryPlan settle_memory_plan(const RunMemory& run, std::int64_t token_cap, bool log);

// The measured side, for the end-of-run line: "predicted X, measured Y (error)".
std::string memory_check_text(const MemoryPlan& plan, std::int64_t measured_bytes, std::string_view measured_what);

}  // namespace odc::train
