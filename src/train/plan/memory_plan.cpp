#include "odc/train/plan/memory_plan.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "odc/backend/backend.h"
#include "odc/backend/backend_workspaces.h"
#include "odc/core/error.h"
#include "odc/core/planned_memory.h"
#include "odc/distributed/comm/comm_buffers.h"
#include "odc/distributed/transport/context/context_exchange.h"
#include "odc/distributed/shard/shard_layout.h"
#include "odc/model/kv_cache.h"
#include "odc/model/units.h"
#include "odc/train/config/config_schema.h"
#include "odc/train/checkpoint/model_export.h"

namespace odc::train {

namespace {

constexpr std::int64_t kF32 = 4;

class Builder {
 public:
  explicit Builder(MemoryPlan& plan) : plan_(plan) {}
  void add(std::string name, std::int64_t bytes, std::string rule, bool on_device = true, bool pooled = true) {
    if (bytes <= 0) return;
    plan_.items.push_back({std::move(name), std::move(rule), bytes, on_device, pooled});
  }
  void note(std::string text) { plan_.notes.push_back(std::move(text)); }
  // What a part reports it will allocate (PlannedMemory: the comm's, the backend's).
  void add(const PlannedMemory& part) {
    for (const auto& item : part.items) plan_.items.push_back(item);
    for (const auto& n : part.notes) note(n);
  }

 private:
  MemoryPlan& plan_;
};

// The comm the factory builds for these inputs (choose_comm, from the facts make_comm reads off
// its group) and the buffers it reports for that choice (comm_buffers.h).
PlannedMemory plan_comm(const MemoryInputs& in, const distributed::CommShape& shape) {
  distributed::CommOptions options;
  options.kind = in.comm;
  options.odc_transport = in.transport;
  options.gather_dtype = in.gather;
  options.deterministic = in.deterministic;
  options.host_staging = in.host_staging;
  options.transport.chunk_bytes = in.chunk_bytes;
  options.transport.max_inflight = in.max_inflight;
  options.transport.direct_load = in.direct_load;
  const bool gpu = in.device != DeviceKind::cpu;
  // A collective on host memory runs over MPI only: a plan made outside MPI (odc-train --plan-memory
  // started alone) is for the MPI launch the run needs. The device is planned for the machine it
  // is on, whose build has CUDA.
  distributed::CommFacts facts =
      distributed::comm_facts(options, in.world, gpu ? "cuda" : "", in.launched_with_mpi || in.comm == distributed::CommKind::collective,
                              std::max(in.hosts, 1));
  facts.cuda_build = true;
  return distributed::planned_buffers(distributed::choose_comm(facts), options, shape, gpu, in.ranks_on_host);
}

}  // namespace

std::int64_t MemoryPlan::device_bytes() const {
  std::int64_t total = 0;
  for (const auto& item : items) total += item.on_device ? item.bytes : 0;
  return total;
}

std::int64_t MemoryPlan::host_bytes() const {
  std::int64_t total = 0;
  for (const auto& item : items) total += item.on_device ? 0 : item.bytes;
  return total;
}

std::int64_t MemoryPlan::pooled_bytes() const {
  std::int64_t total = 0;
  for (const auto& item : items) total += item.on_device && item.pooled ? item.bytes : 0;
  return total;
}

std::int64_t MemoryPlan::peak_bytes() const {
  return inputs.device == DeviceKind::cpu ? device_bytes() + host_bytes() : device_bytes();
}

std::int64_t MemoryPlan::activation_bytes() const {
  for (const auto& item : items) {
    if (item.name == "activations") return item.bytes;
  }
  return 0;
}

std::string MemoryPlan::table() const {
  const bool gpu = inputs.device != DeviceKind::cpu;
  std::string out = fmt::format("memory plan per rank: {} tokens per microbatch, train.recompute {}, {} rank{}, {}\n",
                                inputs.tokens, model::recompute_name(inputs.recompute), inputs.world,
                                inputs.world == 1 ? "" : "s", gpu ? "cuda" : "cpu");
  for (const auto& item : items) {
    out += fmt::format("  {:<32} {:>12}  {}{}\n", item.name, mib_text(item.bytes), item.rule,
                       gpu ? (item.on_device ? "" : " [host]") : "");
  }
  if (gpu) {
    out += fmt::format("  {:<32} {:>12}  device ({} through the allocator); host {}\n", "peak", mib_text(peak_bytes()),
                       mib_text(pooled_bytes()), mib_text(host_bytes()));
  } else {
    out += fmt::format("  {:<32} {:>12}  (host memory)\n", "peak", mib_text(peak_bytes()));
  }
  for (const auto& n : notes) out += fmt::format("  note: {}\n", n);
  return out;
}

nlohmann::json MemoryPlan::to_json() const {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& item : items) {
    list.push_back({{"name", item.name}, {"bytes", item.bytes}, {"rule", item.rule}, {"on_device", item.on_device},
                    {"pooled", item.pooled}});
  }
  return {{"tokens", inputs.tokens},       {"recompute", std::string(model::recompute_name(inputs.recompute))},
          {"world", inputs.world},         {"device", inputs.device == DeviceKind::cpu ? "cpu" : "cuda"},
          {"items", list},                 {"peak_bytes", peak_bytes()},
          {"device_bytes", device_bytes()}, {"host_bytes", host_bytes()},
          {"pooled_bytes", pooled_bytes()}, {"notes", notes}};
}

distributed::ContextExchangeOptions context_exchange_options(const model::LlamaConfig& model, DType activation,
                                                             std::int64_t whole_rows, double timeout_s) {
  distributed::ContextExchangeOptions options;
  if (timeout_s > 0) options.timeout_s = timeout_s;
  options.max_exposed_bytes = model::max_key_rows(whole_rows) * model.kv_dim() * static_cast<std::int64_t>(dtype_size(activation));
  return options;
}

MemoryPlan plan_memory(const MemoryInputs& in) {
  ODC_CHECK(in.world >= 1 && in.tokens >= 0, "plan_memory: world {} tokens {}", in.world, in.tokens);
  MemoryPlan plan;
  plan.inputs = in;
  Builder b(plan);
  const bool gpu = in.device != DeviceKind::cpu;
  const auto units = model::build_unit_layouts(in.model);
  const distributed::ShardLayout layout(units, in.world, 0);
  const distributed::CommShape s = distributed::comm_shape(layout);
  std::int64_t largest_numel = 0;
  std::int64_t total_numel = 0;
  for (const auto& unit : units) {
    largest_numel = std::max(largest_numel, unit.numel);
    total_numel += unit.numel;
  }

  b.add("optimizer state", 4 * s.owned * kF32,
        fmt::format("masters, gradients, exp_avg, exp_avg_sq: 4 x {} owned elements x 4 B", count_text(s.owned)));
  if (gpu) {
    b.add("host staging of the state", 3 * s.owned * kF32,
          fmt::format("masters and moments for I/O: 3 x {} x 4 B", count_text(s.owned)), false);
  }
  b.add(plan_comm(in, s));
  const std::int64_t copy_bytes = backend::weight_copy_element_bytes(in.device, in.compute);
  if (in.world == 1 && in.keep_weight_copies) {
    // One rank computes on the masters: the copies are kept, every unit's, made once per step.
    // The online loop's snapshot is computed on through copies in the same storage: the kept set
    // is dropped when a snapshot comes and goes (Backend::forget_weight_copies), never doubled.
    b.add("weight copies", total_numel * copy_bytes,
          fmt::format("every unit, kept through the step{} ({} elements) x {} B",
                      in.rollout_sequences > 0 ? " and, in the same storage, the rollout snapshot's" : "",
                      count_text(total_numel), copy_bytes));
  } else {
    const int copies = in.model.tie_word_embeddings ? 2 : 1;
    b.add("weight copies", copies * largest_numel * copy_bytes,
          fmt::format("{} live cop{} of the largest unit ({} elements) x {} B", copies, copies == 1 ? "y" : "ies",
                      count_text(largest_numel), copy_bytes));
  }
  const DType act = backend::activation_dtype_of(in.device);
  const std::int64_t chunk_rows = backend::head_chunk_rows_of(in.device, in.model.vocab_size);
  const auto a = model::activation_bytes(in.model, act, in.tokens, in.recompute, chunk_rows, 1, gpu);
  b.add("activations", a.total(),
        fmt::format("layer inputs {} + kept {} + working {} ({}, head chunks of {} rows)", mib_text(a.layer_inputs),
                    mib_text(a.kept), mib_text(a.working), dtype_name(act), chunk_rows));
  backend::WorkspaceFacts workspaces;
  workspaces.tokens = in.tokens;
  workspaces.heads = in.model.num_attention_heads;
  workspaces.kv_heads = in.model.num_key_value_heads;
  workspaces.head_dim = in.model.head_dim;
  workspaces.cudnn_attention = in.cudnn_attention;
  workspaces.cudnn_workspace_limit = in.cudnn_workspace_limit;
  b.add(backend::planned_workspaces(in.device, workspaces));
  if (in.context_rows > 0 && in.world > 1) {
    // A member's key segments attend to its chunks' prefixes, and it receives its rows' gradient
    // copies: at most model::max_key_rows each (1.25 x the whole rows for one long sequence over
    // 2 members, up to 2 x for short sequences in a static group's microbatch).
    const std::int64_t row = in.model.kv_dim() * static_cast<std::int64_t>(dtype_size(act));
    const std::int64_t key_rows = model::max_key_rows(in.context_rows);
    b.add("context keys (split sequences)", 5 * key_rows * row,
          fmt::format("keys, values, their gradients and the received copies over a member's key segments: 5 x {} "
                      "rows (at most 2 x {} whole rows) x {} B", key_rows, in.context_rows, row));
    const auto options = context_exchange_options(in.model, act, in.context_rows, in.comm_timeout_s);
    b.add(distributed::planned_context_exchange(
        options, distributed::choose_context_exchange(in.hosts, in.launched_with_mpi, options), in.world, gpu));
  }
  if (in.rollout_sequences > 0) {
    b.add("rollout weights (online RL)", total_numel * kF32,
          fmt::format("every unit's full weights while sampling ({} elements) x 4 B", count_text(total_numel)));
    const std::int64_t kv_dim = in.model.kv_dim();
    const std::int64_t kv_bytes = dtype_size(act);
    b.add("rollout KV caches (online RL)", in.rollout_sequences * model::kv_cache_bytes(in.model, in.rollout_length, act),
          fmt::format("rl.concurrency {} x {} positions x {} layers x 2 x {} x {} B", in.rollout_sequences,
                      in.rollout_length, in.model.num_hidden_layers, kv_dim, kv_bytes));
    if (in.rollout_reference) {
      b.add("reference shard (rl.kl_beta)", 2 * s.owned * kF32,
            fmt::format("this rank's shard of the reference, and the policy's while they swap: 2 x {} x 4 B",
                        count_text(s.owned)),
            false);
    }
    b.note("online RL: the decode buffers and logits of rl.concurrency sequences are not sized");
  }
  if (in.export_hf) {
    // The streamed export (model_export.h) holds one gather at a time: the writing rank's receive
    // buffer, the host group's own copy of it where the group collects the parts before placing
    // them (shared memory and threads; MPI receives in place), and this rank's encoded part. At
    // 4 B per element (an fp32 export; bf16 and f16 pieces carry twice the elements in as many
    // bytes). A GPU's masters reach the host through the state's host staging (above).
    const std::int64_t part = export_piece_elements(s.largest_shard, in.world, DType::f32) * kF32;
    const int receives = in.launched_with_mpi ? 1 : 2;
    b.add("HF export (checkpoint.export_hf)", receives * in.world * part + part,
          fmt::format("{} x the writer's gather of {} ranks x {} + this rank's part (pieces of at most {} in all)",
                      receives, in.world, mib_text(part), mib_text(static_cast<std::int64_t>(kExportGatherBytes))),
          false, false);
  }
  if (in.sharding != "full") {
    b.note(fmt::format("train.sharding {}: the replica (hybrid) or host-level copy (hpz) comm's buffers are not sized",
                       in.sharding));
  }
  return plan;
}

std::int64_t max_tokens_that_fit(MemoryInputs inputs, std::int64_t budget_bytes, std::int64_t granule) {
  ODC_CHECK(granule >= 1, "max_tokens_that_fit: granule {}", granule);
  const auto fits = [&](std::int64_t tokens) {
    inputs.tokens = tokens;
    return plan_memory(inputs).peak_bytes() <= budget_bytes;
  };
  if (!fits(granule)) return 0;
  // Memory grows with tokens (linearly): double, then bisect on multiples of the granule.
  std::int64_t lo = 1;  // in granules; fits
  std::int64_t hi = 2;
  constexpr std::int64_t kLimit = std::int64_t{1} << 40;
  while (hi * granule < kLimit && fits(hi * granule)) {
    lo = hi;
    hi *= 2;
  }
  while (hi - lo > 1) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    (fits(mid * granule) ? lo : hi) = mid;
  }
  return lo * granule;
}

MemoryInputs memory_inputs(const RunSettings& settings, const model::LlamaConfig& model, int world,
                           std::int64_t tokens, bool launched_with_mpi) {
  MemoryInputs in;
  in.model = model;
  in.world = world;
  in.device = settings.model.device_kind();
  in.compute = settings.model.dtype;
  in.recompute = settings.train.recompute;
  in.tokens = tokens;
  const distributed::CommOptions& comm = settings.comm;
  in.comm = comm.kind;
  in.transport = comm.odc_transport;
  in.gather = comm.gather_dtype;
  in.deterministic = comm.deterministic;
  in.host_staging = comm.host_staging;
  in.launched_with_mpi = launched_with_mpi;
  in.chunk_bytes = comm.transport.chunk_bytes;
  in.comm_timeout_s = comm.transport.timeout_s;
  in.max_inflight = comm.transport.max_inflight;
  in.direct_load = comm.transport.direct_load;
  const std::string& attention = settings.model.attention;
  in.cudnn_attention = backend::plans_cudnn_attention(in.device, attention);
  in.cudnn_workspace_limit = settings.model.cudnn_workspace_mib << 20;
  in.sharding = std::string(distributed::sharding_name(settings.train.sharding));
  in.export_hf = !settings.checkpoint.export_hf.empty();
  if (settings.rl.online()) {
    // The most completions a rank samples in an iteration (the loop's deal), rl.concurrency at a time.
    in.rollout_sequences = std::min(settings.rl.concurrency, settings.rl.most_completions_per_rank(world));
    in.rollout_length = model.max_position_embeddings;
    in.rollout_reference = settings.objective.policy.kl_beta > 0;
  }
  return in;
}

std::int64_t memory_budget(const RunSettings& settings, std::int64_t capacity_bytes) {
  const double gib = settings.train.memory_budget_gib;
  if (gib > 0) return static_cast<std::int64_t>(std::min(gib, kMaxMemoryBudgetGib) * 1073741824.0);
  if (capacity_bytes <= 0) return 0;
  return static_cast<std::int64_t>(static_cast<double>(capacity_bytes) * (1.0 - kBudgetMargin));
}

void check_fits(const MemoryPlan& plan, std::int64_t budget_bytes, std::string_view budget_origin) {
  if (budget_bytes <= 0 || plan.peak_bytes() <= budget_bytes) return;
  std::string fixes;
  if (plan.inputs.recompute != model::Recompute::full) {
    fixes += fmt::format("train.recompute: full (activations {} now), ",
                         mib_text(plan.activation_bytes()));
  }
  fail("the memory plan needs {} per rank but the budget is {} ({}): set {}a smaller "
       "data.max_tokens_per_microbatch (or auto: the largest that fits), or more ranks\n{}",
       mib_text(plan.peak_bytes()), mib_text(budget_bytes), budget_origin, fixes, plan.table());
}

RunMemory plan_run_memory(const RunSettings& settings, const model::LlamaConfig& model, int shard_world,
                          std::int64_t capacity_bytes, int ranks_sharing, bool launched_with_mpi,
                          std::int64_t rollout_length, int hosts) {
  RunMemory run;
  run.inputs = memory_inputs(settings, model, shard_world, 0, launched_with_mpi);
  run.inputs.hosts = hosts;
  if (rollout_length > 0 && run.inputs.rollout_sequences > 0) run.inputs.rollout_length = rollout_length;
  run.inputs.ranks_on_host = ranks_sharing;
  run.budget = memory_budget(settings, capacity_bytes);
  run.budget_origin = settings.train.memory_budget_gib > 0
                          ? std::string("train.memory_budget_gib")
                          : fmt::format("this rank's share of the {}, {}, less {:.0f}%",
                                        run.inputs.device == DeviceKind::cpu
                                            ? fmt::format("host's available memory ({} rank{} here)", ranks_sharing, ranks_sharing == 1 ? "" : "s")
                                            : std::string("device's memory"),
                                        mib_text(capacity_bytes), kBudgetMargin * 100);
  if (settings.data.auto_token_cap) {
    if (run.budget <= 0) {
      fail("data.max_tokens_per_microbatch: auto needs this rank's memory, which could not be read: set "
           "train.memory_budget_gib or a number of tokens");
    }
    run.auto_token_cap = max_tokens_that_fit(run.inputs, run.budget);
    if (run.auto_token_cap == 0) {
      MemoryInputs at = run.inputs;
      at.tokens = 256;
      fail("data.max_tokens_per_microbatch: auto: not even 256 tokens fit this rank's budget of {} ({}); the plan "
           "at 256 tokens:\n{}",
           mib_text(run.budget), run.budget_origin, plan_memory(at).table());
    }
  }
  return run;
}

MemoryPlan settle_memory_plan(const RunMemory& run, std::int64_t token_cap, bool log) {
  MemoryInputs inputs = run.inputs;
  inputs.tokens = token_cap;
  MemoryPlan plan = plan_memory(inputs);
  if (run.budget > 0 && plan.peak_bytes() > run.budget && inputs.world == 1 && inputs.keep_weight_copies) {
    // Copies of every unit kept through the step are a speed-up, not a need: without them the
    // copies are made at every acquire (one unit's at a time).
    inputs.keep_weight_copies = false;
    MemoryPlan lean = plan_memory(inputs);
    if (lean.peak_bytes() <= run.budget) {
      if (log) {
        spdlog::info("memory: the weights' compute copies are made at every acquire: keeping all of them through the "
                     "step ({} more) would not fit", mib_text(plan.peak_bytes() - lean.peak_bytes()));
      }
      plan = std::move(lean);
    }
  }
  check_fits(plan, run.budget, run.budget_origin);
  if (log) {
    spdlog::info("memory: the plan needs {} per rank at {} tokens per microbatch{} of a budget of {} ({}); "
                 "odc-train --plan-memory lists its items",
                 mib_text(plan.peak_bytes()), token_cap,
                 run.auto_token_cap > 0 ? " (data.max_tokens_per_microbatch: auto)" : "", mib_text(run.budget),
                 run.budget > 0 ? run.budget_origin : std::string("unknown: nothing checked"));
  }
  return plan;
}

std::string memory_check_text(const MemoryPlan& plan, std::int64_t measured_bytes, std::string_view measured_what) {
  const std::int64_t predicted = plan.inputs.device == DeviceKind::cpu ? plan.peak_bytes() : plan.pooled_bytes();
  const double error = predicted > 0 ? 100.0 * static_cast<double>(measured_bytes - predicted) / static_cast<double>(predicted) : 0.0;
  return fmt::format("memory: predicted {} per rank, measured {} ({}), {:+.1f}%", mib_text(predicted),
                     mib_text(measured_bytes), measured_what, error);
}

}  // namespace odc::train
