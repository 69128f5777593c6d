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
}  // namespace

Trainer::~Trainer() = default;

StepResult Trainer::step() {
  // Outside the step's time; run() asks first, with its stop signals.
  if (step_source_) step_source_->before_step(*this, step_, nullptr);
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
  const double exchange_before = timed_exchange_ ? timed_exchange_->seconds() : 0.0;
  for (const auto& split : minibatch.context) r.split_microbatches += split.active() ? 1 : 0;
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
    r.context_exchange_s = timed_exchange_ ? timed_exchange_->seconds() - exchange_before : 0.0;
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
    // A stop request while the step source prepares the step's data (the online RL loop's reward
    // command) ends the run before the step (a resume prepares it anew), as a stop after a step does.
    if (step_source_ && !step_source_->before_step(*this, step_, signals)) {
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
