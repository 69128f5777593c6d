#include "odc/train/run/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <thread>

#include <spdlog/spdlog.h>

#include "odc/core/error.h"
#include "odc/core/hash.h"
#include "odc/core/process_stats.h"
#include "odc/distributed/group/in_process_group.h"
#include "odc/io/checkpoint_format.h"
#include "odc/io/native_checkpoint.h"
#include "odc/train/config/batch_schedule.h"
#include "odc/train/config/config_schema.h"
#include "odc/train/plan/memory_plan.h"
#include "odc/train/run/output_probe.h"
#include "odc/train/config/run_settings.h"
#include "odc/train/run/stop_signals.h"

namespace odc::train {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Rejects world sizes for which some rank would own nothing but padding of some unit: such a run
// would still be correct but wastes ranks, and it usually means a wrong -np.
void check_world_size(const std::vector<model::UnitLayout>& units, int world_size) {
  for (const auto& unit : units) {
    const std::int64_t shard = (unit.numel + world_size - 1) / world_size;
    if (shard * (world_size - 1) >= unit.numel) {
      const std::int64_t usable = std::max<std::int64_t>(1, (unit.numel + shard - 1) / shard);
      fail("world size {} is too large for unit '{}' ({} parameters): ranks >= {} would own only padding; "
           "run with fewer ranks or a larger model", world_size, unit.name, unit.numel, usable);
    }
  }
}

// The layout of train.sharding over the group's hosts (or debug.ranks_per_host's blocks).
distributed::ShardingPlan sharding_plan(const RunSettings& settings, distributed::HostGroup& group) {
  const auto kind = settings.train.sharding;
  const auto block = settings.debug.ranks_per_host;
  distributed::Placement placement{1, group.size(), 0, group.rank()};
  if (block > 0) {
    placement = distributed::block_placement(group.rank(), group.size(), static_cast<int>(block), "debug.ranks_per_host");
  } else if (kind != distributed::Sharding::full) {
    placement = group.placement();
  } else {
    // Full sharding only describes the hosts: uneven ones are fine for it.
    try {
      placement = group.placement();
    } catch (const Error&) {
    }
  }
  return distributed::plan_sharding(kind, group.rank(), group.size(), placement);
}

// The model this run trains. A resumed run's checkpoint holds the model config and every weight,
// so the base weights of model.checkpoint are never read then, and a model.checkpoint that was
// moved away is not needed: its config.json is compared when it is there, else the checkpoint's
// model config is taken.
model::LlamaConfig run_model_config(const Config& config, const RunSettings& settings, const std::string& resume_path) {
  const std::string& base = settings.model.checkpoint;
  if (resume_path.empty() || base.empty() || std::filesystem::exists(std::filesystem::path(base) / "config.json")) {
    return training_model_config(config);
  }
  const TrainingManifest manifest = TrainingManifest::from_json(io::read_manifest(resume_path), resume_path);
  if (manifest.model_config.is_null()) fail("checkpoint '{}': the manifest holds no model_config", resume_path);
  spdlog::info("model.checkpoint '{}' is not there (moved?): not needed, {} holds the model config and every weight",
               base, resume_path);
  return model::LlamaConfig::from_json(manifest.model_config, resume_path + "/manifest.json", false);
}

// Text data is tokenized with model.checkpoint's tokenizer.json unless data.tokenizer names one:
// that file is the one thing of the base checkpoint a resumed run still needs.
void check_tokenizer_present(const RunSettings& settings) {
  const std::string& format = settings.data.format;
  const std::string& base = settings.model.checkpoint;
  if ((format != "chat" && format != "text") || !settings.data.tokenizer.empty() || base.empty()) return;
  const auto tokenizer = std::filesystem::path(base) / "tokenizer.json";
  if (!std::filesystem::exists(tokenizer)) {
    fail("data.format {} tokenizes with model.checkpoint's tokenizer, but '{}' does not exist (was model.checkpoint "
         "moved?): set data.tokenizer to the tokenizer.json (a native checkpoint holds the model and its weights, "
         "not the tokenizer)", format, tokenizer.string());
  }
}

// This rank among the ranks of its host, as the launcher says (Open MPI, odc-run --local, Slurm);
// else its rank (ranks that are threads of one process).
int local_rank(int rank) {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "ODC_LOCAL_RANK", "SLURM_LOCALID"}) {
    if (const char* value = std::getenv(name); value != nullptr && *value != '\0') return std::atoi(value);
  }
  return rank;
}

}  // namespace

Trainer::Trainer(const Config& config, distributed::HostGroup& group) : Trainer(config, nullptr, &group) {}

Trainer::Trainer(const Config& config)
    : Trainer(config, std::move(distributed::InProcessGroup::create(1).front()), nullptr) {}

Trainer::Trainer(const Config& config, std::unique_ptr<distributed::HostGroup> own_group, distributed::HostGroup* group)
    : config_(config), own_group_(std::move(own_group)), group_(group != nullptr ? *group : *own_group_) {
  const int rank = group_.rank();
  const int world = group_.size();
  group_.announce("starting up (data, model, checkpoint)");
  // Every key this run reads, once (train.threads is checked against this machine here).
  settings_ = resolve_run_settings(config);
  const RunSettings& settings = settings_;

  // The backend first: a device that cannot be used (no CUDA build or GPU, several ranks) fails
  // before anything is read or written. The trainer owns it and lends it to the model, the comm
  // (the state's memory), the optimizer (through the store) and the evaluator.
  backend_ = training_backend(settings, local_rank(rank));
  check_export_target(config);  // before anything is read, written or trained
  // Outputs written only at the end of the run (by rank 0) are proven writable before anything
  // is read or trained.
  if (group_.is_root()) {
    if (const auto trace = rank_output_path(settings.train.trace_file, 0); !trace.empty()) {
      probe_output_file(trace, "train.trace_file");
    }
    if (const auto& hf = settings.checkpoint.export_hf; !hf.empty()) {
      probe_output_directory(hf, "checkpoint.export_hf");
    }
  }
  // The checkpoint directory is locked and the run's identity and resume point settled before
  // anything is read: a second job on the directory, or another run's checkpoints there, stop
  // every rank here.
  if (const auto& from = settings.checkpoint.resume; from != "auto" && from != "never") {
    io::refuse_hf_where_native_expected(from, "checkpoint.resume");  // an HF directory: say how to use it
  }
  checkpointer_ = std::make_unique<Checkpointer>(settings, config, group_);
  const std::string resume = checkpointer_->begin_run().resume_path;
  model_config_ = run_model_config(config, settings, resume);
  check_tokenizer_present(settings);
  sharding_ = sharding_plan(settings, group_);
  // The memory plan (memory_plan.h): data.max_tokens_per_microbatch: auto resolves from it, and a
  // run it does not fit is refused below, before anything is trained.
  if (settings.rl.online()) online_ = std::make_unique<OnlineRollouts>(settings, model_config_, rank, world);
  const RunMemory memory = plan_run_memory(settings, model_config_, sharding_.shard_world,
                                           backend_->memory_capacity(group_.ranks_on_host()),
                                           group_.ranks_on_host(), group_.over_mpi(),
                                           online_ ? online_->max_sequence_length() : 0,
                                           sharding_.kind == distributed::Sharding::hybrid ? 1 : distributed::comm_hosts(group_));
  data_ = std::make_unique<MinibatchSource>(settings, config, model_config_, rank, world, settings.comm.kind,
                                            memory.auto_token_cap, online_ ? online_->max_sequence_length() : 0);
  if (Evaluator::configured(settings)) {
    evaluator_ = std::make_unique<Evaluator>(settings, model_config_, rank, world, data_->token_cap());
  }
  memory_plan_ = settle_memory_plan(memory, data_->token_cap(), group_.is_root());  // or refuse the run
  // The measured side: what the resident set grows by from here (the model, its state and buffers,
  // the activations), against the plan at the end of the run.
  baseline_rss_ = read_process_stats().rss_bytes;
  model_ = std::make_unique<model::LlamaModel>(model_config_, *backend_);
  const auto& mc = model_config_;  // model.attention: settled (an impossible cudnn fails) before anything is trained
  spdlog::info("attention: {}",
               backend_->select_attention(mc.num_attention_heads, mc.num_key_value_heads, mc.head_dim));
  model_->set_recompute(memory_plan_.inputs.recompute);  // train.recompute, as planned
  if (settings.objective.grpo) model_->set_policy_objective(settings.objective.policy, settings.objective.entropy);
  // Only a checkpoint (or another rank) can need the fingerprint: it reads the whole dataset.
  if (online_) {
    data_fingerprint_ = online_->fingerprint();
  } else if (world > 1 || checkpointer_->in_use()) {
    data_fingerprint_ = data_->fingerprint();
  }
  if (world > 1) {
    // Every rank must train the same thing: compare fingerprints before any collective that
    // would otherwise hang or silently mix different inputs.
    distributed::check_identical_across_ranks(group_, {{"the configuration", fnv1a64(config.canonical())},
                                                       {"the model config", fnv1a64(model_config_.to_json().dump())},
                                                       {(online_ ? "the prompts " : "the dataset ") + data_description(), data_fingerprint_}});
  }
  if (world > 1) check_world_size(model_->units(), sharding_.shard_world);
  if (sharding_.kind == distributed::Sharding::hybrid) {
    // The collectives run inside a host: lb_micro equalizes, and padding evens, only a host's counts.
    std::vector<double> hosts(static_cast<std::size_t>(world), 0.0);
    hosts[static_cast<std::size_t>(rank)] = sharding_.placement.host;
    group_.all_reduce_sum(hosts, "the hosts of the ranks");
    std::vector<int> host_of_rank;
    for (double h : hosts) host_of_rank.push_back(static_cast<int>(h));
    data_->set_collective_groups(std::move(host_of_rank));
  }
  // Weights that a checkpoint (the resume point, else model.checkpoint) will fill are not drawn
  // from the random initialization first.
  const bool loads_weights = !resume.empty() || !settings.model.checkpoint.empty();
  comm_ = distributed::make_sharded_comm(settings.comm, sharding_, group_, model_->units(), model_config_,
                                         loads_weights ? std::nullopt : std::optional(settings.model.seed),
                                         backend_.get());
  // Compute copies of the weights made once per step where the comm hands out the masters (and the
  // memory plan has room for them).
  backend_->keep_weight_copies(comm_->comm().hands_out_masters() && memory_plan_.inputs.keep_weight_copies);
  // Where several hosts hold the same shards (hybrid), the first host's ranks write them.
  checkpointer_->set_shards(sharding_.shard_rank, sharding_.shard_world, sharding_.replica == 0);
  if (settings.debug.slow_rank == rank) delay_s_ = settings.debug.delay_ms / 1000.0;

  optim::AdamWConfig adam;
  adam.beta1 = settings.train.beta1;
  adam.beta2 = settings.train.beta2;
  adam.eps = settings.train.eps;
  adam.weight_decay = settings.train.weight_decay;
  optimizer_ = std::make_unique<optim::ShardedAdamW>(adam);
  if (online_) {
    steps_per_iteration_ = online_->steps_per_iteration(data_->global_batch_size(), data_->global_batch_origin());
    length_.steps = settings.rl.iterations * steps_per_iteration_;
  } else {
    length_ = run_length(config, data_->dataset().size(), data_->global_batch_size());
  }
  schedule_ = lr_schedule(config, length_.steps);

  // The initial weights, whatever their source: the checkpoint resumed, model.checkpoint's
  // Hugging Face weights, or the store's random initialization.
  const InitialState initial = checkpointer_->initial_state(
      store(), settings.model.checkpoint,
      {model_config_, data_fingerprint_, data_description(), data_->global_batch_size()});
  source_ = initial.source;
  if (const auto& manifest = initial.resumed) {
    if (online_) resume_iteration(resume, *manifest);  // mid-iteration: its rollouts (else the next samples anew)
    if (manifest->sampler && data_->has_data()) data_->sampler().restore(*manifest->sampler);
    optimizer_->set_steps_taken(manifest->optimizer_steps);
    step_ = manifest->step;
    first_step_ = step_;
    resumed_from_ = resume;
    spdlog::info("{}", initial.resumed_note);  // every check of the checkpoint passed
  }
  if (online_ && settings.objective.policy.kl_beta > 0) keep_reference(initial);
  checkpointer_->retire_abandoned();  // a rollback's abandoned branch, once the resume succeeded

  if (!settings.train.trace_file.empty()) tracer_ = std::make_unique<Tracer>(rank);
  // The MFU denominator: train.peak_flops, else the device's measured peak (and then also the
  // GEMM rate for the GEMM fraction; with train.peak_flops nothing is measured).
  const backend::DeviceDescription device = backend_->describe();
  peak_flops_ = settings.train.peak_flops;
  backend::PeakFlops measured;
  if (peak_flops_ == 0) {
    measured = backend_->measure_peak_flops();
    // One denominator on every rank: the best any rank found (ranks measure at once, and one that
    // lost time to a busy core would otherwise divide by less than its peers).
    if (world > 1) {
      std::vector<double> peaks(static_cast<std::size_t>(world), 0.0);
      peaks[static_cast<std::size_t>(rank)] = measured.device;
      group_.all_reduce_sum(peaks, "the peak FLOP/s agreement");
      const double own = measured.device;
      for (const double p : peaks) measured.device = std::max(measured.device, p);
      if (measured.device > own) measured.source += fmt::format("; {:.1f} GFLOP/s on another rank", measured.device / 1e9);
    }
    peak_flops_ = measured.device;
    gemm_flops_ = measured.gemm;
  }
  report_ = std::make_unique<RunReport>(
      settings.train, group_, peak_flops_, gemm_flops_, resumed_from_.empty() ? 0 : step_,
      initial.resumed && initial.resumed->unwritten_metrics.contains(rank) ? initial.resumed->unwritten_metrics.at(rank)
                                                                           : std::vector<std::string>{});
  // Every rank's clocks (traces) start together.
  if (world > 1) group_.barrier("the start-up barrier");
  if (tracer_) tracer_->set_origin(Tracer::Clock::now());

  spdlog::info("model: {} layers, hidden {}, heads {}/{} (q/kv), vocab {}, {:.2f}M parameters{}",
               model_config_.num_hidden_layers, model_config_.hidden_size, model_config_.num_attention_heads,
               model_config_.num_key_value_heads, model_config_.vocab_size,
               static_cast<double>(model_config_.num_parameters()) / 1e6,
               model_->recompute() == model::Recompute::none
                   ? std::string()
                   : fmt::format("; activation recomputation {} (train.recompute)", model::recompute_name(model_->recompute())));
  const std::int64_t global = data_->global_batch_size();
  spdlog::info("data: {}, global batch {} sequences per step ({}), microbatch cap {} tokens",
               data_description(), global, data_->global_batch_origin(), data_->token_cap());
  if (length_.epochs > 0) {
    spdlog::info("train.epochs {}: {} steps per epoch{}, {} steps", length_.epochs, length_.steps_per_epoch,
                 length_.last_step_sequences < global
                     ? fmt::format(" (the last trains the remaining {} sequence{})", length_.last_step_sequences,
                                   length_.last_step_sequences == 1 ? "" : "s")
                     : std::string(),
                 length_.steps);
  }
  const auto steps_text = [](std::int64_t n) { return fmt::format("{} step{}", n, n == 1 ? "" : "s"); };
  spdlog::info("lr: {} schedule, peak {:.3g}, warmup: {}{}", schedule_.kind, schedule_.lr,
               steps_text(schedule_.warmup_steps),
               schedule_.kind == "wsd" ? ", decay: the last " + steps_text(schedule_.decay_steps) : std::string());
  if (schedule_.warmup_steps >= length_.steps && length_.steps > 0 && group_.is_root()) {  // the same on every rank
    spdlog::warn("the warmup ({}) is as long as the run ({}): the learning rate never reaches train.lr = {:.3g}; set "
                 "train.warmup_steps or train.warmup_ratio",
                 steps_text(schedule_.warmup_steps), steps_text(length_.steps), schedule_.lr);
  }
  spdlog::info("{}; {}", device.text,
               measured.device > 0
                   ? fmt::format("peak {:.1f} GFLOP/s ({}), GEMM {:.1f} GFLOP/s ({:.0f}% of peak)",
                                 measured.device / 1e9, measured.source, measured.gemm / 1e9,
                                 100.0 * measured.gemm / measured.device)
                   : fmt::format("peak {:.1f} GFLOP/s (train.peak_flops; nothing measured)", peak_flops_ / 1e9));
  if (!device.warning.empty()) spdlog::warn("{}", device.warning);
  spdlog::info("comm: {} over {} rank{}; {} compute thread{} per rank; MFU against {:.1f} GFLOP/s per rank{}",
               comm_->comm().name(), world, world == 1 ? "" : "s", settings.train.threads,
               settings.train.threads == 1 ? "" : "s", peak_flops_ / 1e9,
               measured.device > 0 ? " (device peak)" : " (train.peak_flops)");
  if (world > 1) spdlog::info("sharding: {}", sharding_.describe());
}

Trainer::~Trainer() = default;

StepResult Trainer::step() {
  // Outside the step's time; run() samples first, with its stop signals.
  if (online_ && step_ % steps_per_iteration_ == 0 && sampled_for_ != step_) begin_iteration(nullptr);
  const auto start = Clock::now();
  distributed::Comm& comm = comm_->comm();
  StepResult r;
  r.step = step_;
  r.lr = schedule_.at(step_);

  const bool equal_counts = comm.needs_equal_microbatches();
  const Minibatch minibatch = data_->next(equal_counts);
  // Steps are named 1-based, as in the progress line, the metrics and the checkpoint directories;
  // the minibatch is the same on every rank, so rank 0 alone says so.
  if (minibatch.normalizer == 0.0 && group_.is_root()) {
    spdlog::warn("step {}: the minibatch has no target tokens (all masked)", step_ + 1);
  }
  if (minibatch.zero_advantages && group_.is_root()) spdlog::warn("step {}: {}", step_ + 1, zero_advantages_reason(minibatch.zero_advantages_rounded));
  const data::Plan& plan = minibatch.plan;
  last_plan_hash_ = plan.hash();
  r.bubble_planned = equal_counts ? plan.bubble_collective() : plan.bubble_odc();
  r.planned_makespan = equal_counts ? plan.makespan_collective() : plan.makespan_odc();
  r.planned_cost = plan.ranks[static_cast<std::size_t>(group_.rank())].cost;
  for (const auto& rank_plan : plan.ranks) r.planned_cost_max = std::max(r.planned_cost_max, rank_plan.cost);
  r.padded_microbatches = minibatch.padded;
  r.sequences = static_cast<std::int64_t>(minibatch.global.size());

  // Tracing covers the first train.trace_steps steps (all when 0).
  const std::int64_t trace_steps = settings_.train.trace_steps;
  Tracer* tracer = tracer_ && (trace_steps == 0 || step_ < trace_steps) ? tracer_.get() : nullptr;
  model_->set_tracer(tracer);
  comm.set_tracer(tracer);
  if (tracer != nullptr) tracer->set_step(step_ + 1);  // 1-based, as in the metrics and the progress line

  const distributed::CommWaits waits_before = comm.waits();
  const auto minibatch_start = Clock::now();
  group_.announce(fmt::format("step {}: minibatch start", step_ + 1));
  {
    const TraceScope trace(tracer, "barrier", "minibatch start");
    comm.begin_minibatch();
  }
  double local_loss = 0.0;
  double local_targets = 0.0;
  kernels::PolicyLossSums policy;
  double policy_nll = 0.0;
  const std::size_t count = minibatch.mine.size();
  for (std::size_t m = 0; m < count; ++m) {
    data_->build(minibatch, m, batch_);
    const double tokens = static_cast<double>(batch_.num_tokens());
    const double pairs = batch_.causal_pairs();
    if (tracer != nullptr) tracer->set_microbatch(static_cast<std::int64_t>(m));
    group_.announce(fmt::format("step {}: microbatch {}/{}", step_ + 1, m + 1, count));
    const TraceScope trace(tracer, "microbatch", fmt::format("microbatch {}", m), {{"tokens", tokens}, {"pairs", pairs}});
    if (delay_s_ > 0) std::this_thread::sleep_for(std::chrono::duration<double>(delay_s_));
    const auto out = model_->train_microbatch(batch_, comm, comm);
    local_loss += out.weighted_loss;
    local_targets += out.target_tokens;
    policy.add(out.policy);
    policy_nll += out.nll_sum;
    r.local_tokens += tokens;
    r.flops += model_config_.training_flops(tokens, pairs);
  }
  if (tracer != nullptr) tracer->set_microbatch(-1);
  std::array<double, 8> sums{};
  {
    const TraceScope trace(tracer, "barrier", "minibatch end");
    group_.announce(fmt::format("step {}: minibatch end", step_ + 1));
    comm.end_minibatch();
    backend_->synchronize();  // a device's queued work belongs to this minibatch's time
    const distributed::CommWaits waits_after = comm.waits();
    r.wait_gather_s = waits_after.gather_s - waits_before.gather_s;
    r.wait_push_s = waits_after.push_s - waits_before.push_s;
    r.wait_barrier_s = waits_after.barrier_s - waits_before.barrier_s;
    r.wait_in_loop_s = r.wait_gather_s + r.wait_push_s;
    r.wait_end_s = r.wait_barrier_s;
    r.comm_thread_cpu_s = comm.resources().thread_cpu_s;
    r.minibatch_s = seconds_since(minibatch_start);  // the minibatch's compute and communication
    r.compute_s = std::max(0.0, r.minibatch_s - r.wait_in_loop_s - r.wait_end_s);
    // Replicated shards (hybrid) hold the same sums on every host: the first host's count once.
    const double grad_squares = sharding_.replica == 0 ? store().grad_sum_of_squares() : 0.0;
    sums = {grad_squares, local_loss, r.local_tokens, local_targets,
            static_cast<double>(r.padded_microbatches), r.wait_in_loop_s + r.wait_end_s, r.minibatch_s, r.flops};
    group_.all_reduce_sum(sums, "the minibatch-end sums (gradient norm, loss, tokens)");
  }
  r.grad_norm = std::sqrt(sums[0]);
  r.loss = sums[1];
  r.tokens = sums[2];
  r.target_tokens = sums[3];
  r.padded_microbatches_global = static_cast<int>(sums[4]);
  // Measured bubble: the fraction of the ranks' minibatch time spent waiting on communication.
  r.bubble_measured = sums[6] > 0 ? sums[5] / sums[6] : 0.0;
  r.microbatches = static_cast<int>(count);
  if (settings_.objective.grpo) r.policy = reduce_policy_metrics(group_, policy, policy_nll);
  if ((!std::isfinite(r.loss) || !std::isfinite(r.grad_norm)) && step_ > first_step_) {
    fail("step {}: loss ({}) or gradient norm ({}) is not finite; lower train.lr or check the data", step_ + 1,
         r.loss, r.grad_norm);
  }
  if (!std::isfinite(r.loss) || !std::isfinite(r.grad_norm)) {
    // Before any update the learning rate has not acted: the weights the run started from overflow.
    const std::string& base = settings_.model.checkpoint;
    const std::string model = !resumed_from_.empty() ? fmt::format("the checkpoint resumed, '{}',", resumed_from_)
                              : !base.empty()        ? fmt::format("the model in '{}' (model.checkpoint)", base)
                                                     : std::string("the randomly initialized model (model.config)");
    fail("step {}: loss ({}) or gradient norm ({}) is not finite at the run's first step, before any update (so not "
         "because of train.lr): {} gives values that are not finite on this data (an activation overflows, or a "
         "weight is not finite); odc-eval scores a model without training",
         step_ + 1, r.loss, r.grad_norm, model);
  }
  const auto optimizer_start = Clock::now();
  group_.announce(fmt::format("step {}: optimizer", step_ + 1));
  {
    const TraceScope trace(tracer, "optimizer", "optimizer step");
    optimizer_->step(store(), r.lr, optim::clip_coefficient(r.grad_norm, settings_.train.grad_clip));
    backend_->weights_changed();  // kept compute copies are redone at their next use
    backend_->synchronize();
  }
  r.optimizer_s = seconds_since(optimizer_start);
  ++step_;
  r.seconds = seconds_since(start);
  r.mfu = peak_flops_ > 0 ? sums[7] / (static_cast<double>(group_.size()) * r.seconds * peak_flops_) : 0.0;
  r.gemm_fraction = gemm_flops_ > 0 ? r.mfu * peak_flops_ / gemm_flops_ : 0.0;
  return r;
}

std::vector<StepResult> Trainer::run(bool keep_results, const StopSignals* signals) {
  const std::int64_t steps = length_.steps;
  const std::int64_t stop_at = settings_.train.stop_at_step;
  const std::int64_t last = stop_at > 0 ? std::min(stop_at, steps) : steps;
  std::vector<StepResult> results;
  const std::int64_t first = step_;
  if (first >= last) spdlog::info("nothing to do: {} steps done, this run ends at step {}", first, last);
  report_->begin_run(first, last, steps);
  // A stop signal on any rank (when `listen`: not after the last step) and a failed metrics write
  // on any rank: every rank learns both at the same step (one small all-reduce).
  double metrics_failed_ranks = 0.0;
  const auto stop_ranks = [&](std::string_view when, bool listen = true) {
    std::array<double, 2> stop{listen && signals != nullptr && signals->requested() ? 1.0 : 0.0,
                               metrics_error_.empty() ? 0.0 : 1.0};
    group_.announce(fmt::format("step {}: stop-signal check", step_));
    group_.all_reduce_sum(stop, "the stop-signal check");
    metrics_failed_ranks = stop[1];
    if (stop[0] > 0 && stop[1] == 0) {
      spdlog::warn("stop requested ({} on {} rank(s)) {}: {}",
                   signals != nullptr && signals->requested() ? signals->describe() : std::string("a signal"),
                   stop[0], when,
                   step_ == first ? "nothing trained, nothing to save"
                   : checkpointer_->enabled() ? "saving a checkpoint and exiting; resume with checkpoint.resume: auto"
                                              : "no checkpoint.dir is set, so nothing is saved");
    }
    return stop[0] > 0;
  };
  // A signal during set-up (loading, planning): stop before the first step.
  bool preempted = first < last && stop_ranks("before the first step");
  std::int64_t saved_at = -1;
  for (std::int64_t s = first; s < last && !preempted; ++s) {
    // A stop request while the online loop's reward command runs ends the run at the iteration's
    // start (its rollouts dropped: a resume samples it anew), as a stop after a step does.
    if (online_ && step_ % steps_per_iteration_ == 0 && !begin_iteration(signals)) {
      preempted = true;
      break;
    }
    const StepResult r = step();
    if (keep_results) results.push_back(r);
    record_metrics([&] { report_->record(r, {data_->sampler().epoch(), comm_->state_bytes(), comm_->comm().resources()}); });
    // Finishes here, checkpoints below and returns normally (exit 0).
    preempted = stop_ranks(fmt::format("after step {}", step_), step_ < last);
    if (metrics_failed_ranks > 0) end_on_metrics_failure(metrics_failed_ranks, false);
    // A step's eval line comes before its checkpoint: a checkpoint holds every metrics line of its
    // step, written or (end_on_metrics_failure) kept in it.
    const bool eval_due = !preempted && evaluator_ && evaluator_->due(step_, last);
    if (eval_due) {
      evaluate();
      stop_ranks(fmt::format("after the eval of step {}", step_), false);  // its metrics line
      if (metrics_failed_ranks > 0) end_on_metrics_failure(metrics_failed_ranks, false);
    }
    const bool saved = !preempted && checkpointer_->due(step_, last);
    if (saved) save_checkpoint();
    if (saved) saved_at = step_;
    if (eval_due) track_best(saved);
    report_->progress(r);
  }
  // The end of a finished run is evaluated (a preempted one is not finished: its resume will be).
  const bool eval_at_end = !preempted && evaluator_ && (!last_eval_ || last_eval_->step != step_);
  if (eval_at_end) {
    evaluate();
    stop_ranks(fmt::format("after the eval of step {}", step_), false);  // its metrics line
    // Nothing trained: step_'s checkpoint is the one resumed (a resume evaluates it again).
    if (metrics_failed_ranks > 0) end_on_metrics_failure(metrics_failed_ranks, step_ == first);
  }
  // (Saved already when the loop ended at an online iteration's start, its step checkpointed.)
  const bool saved_last = checkpointer_->enabled() && step_ > first && saved_at != step_;
  if (saved_last) save_checkpoint();
  if (eval_at_end) track_best(checkpointer_->enabled() && (step_ > first || !resumed_from_.empty()));
  group_.announce("finishing (export, summary, trace)");
  // A preempted run exports nothing: it is not finished (the checkpoint resumes it).
  if (!preempted && !settings_.checkpoint.export_hf.empty()) {
    // The first copy of the shards is gathered over its group (world rank 0 is its rank 0).
    if (sharding_.replica == 0) export_hf(config_, comm_->shard_group(), store(), model_config_, source_);
    if (sharding_.replicas > 1) group_.barrier("the end of the export (every host)");
  }
  report_->summary(static_cast<double>(comm_->state_bytes()));
  log_memory_check();
  if (tracer_) report_->write_trace(*tracer_, trace_metadata());
  return results;
}

// The plan against what the run used: a GPU's allocator peak, else the growth of the resident
// set since just before the model was built (every rank logs its own: ranks differ).
void Trainer::log_memory_check() {
  const std::int64_t pooled = backend_->allocator_peak_bytes();
  const std::string text =
      pooled > 0 ? memory_check_text(memory_plan_, pooled, "the device allocator's peak")
                 : memory_check_text(memory_plan_, read_process_stats().peak_rss_bytes - baseline_rss_,
                                     "peak resident set growth since the model was built");
  spdlog::info("{}", text);
}

EvalSummary Trainer::evaluate() {
  if (!evaluator_) fail("no evaluation data: set data.eval");
  const auto start = Clock::now();
  last_eval_ = evaluator_->run(*model_, *backend_, comm_->comm(), group_, step_);
  record_metrics([&] { report_->record_eval(*last_eval_, seconds_since(start)); });
  return *last_eval_;
}

// A failed metrics write is kept, not thrown: only the ranks with a metrics file see it, and
// every rank must take part in the checkpoint that comes first (run() exchanges it).
nlohmann::json Trainer::trace_metadata() const {
  const auto& cost = data_->cost_model();
  return {{"world_size", group_.size()},
          {"comm", std::string(comm_->comm().name())},
          {"balance", data::balance_name(data_->balance())},
          {"threads", settings_.train.threads},
          {"global_batch_size", data_->global_batch_size()},
          {"minibatch_size", static_cast<double>(data_->global_batch_size()) / group_.size()},
          {"token_cap", data_->token_cap()},
          {"cost_model", {{"kind", cost.kind}, {"a", cost.a}, {"b", cost.b}}},
          {"peak_flops", peak_flops_},
          {"gemm_flops", gemm_flops_},
          {"param_bytes", 4},
          {"model", model_config_.to_json()}};
}

}  // namespace odc::train
