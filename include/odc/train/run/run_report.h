#pragma once
// RunReport: what a training run tells its user — one JSON line per step in the metrics file
// (fields: docs/performance.md), the progress line (step, loss, tokens/s, MFU, bubble, ETA), the
// end-of-run summary with a per-rank table of compute and waits (rank 0), and the Chrome trace of
// every rank's timeline (gathered to rank 0). The summary and the trace are collective.
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "odc/core/trace.h"
#include "odc/distributed/comm/comm.h"
#include "odc/distributed/group/host_group.h"
#include "odc/kernels/policy_loss.h"
#include "odc/train/config/output_pattern.h"
#include "odc/train/config/run_settings.h"
#include "odc/train/run/evaluation.h"
#include "odc/train/run/metrics.h"
#include "odc/train/run/step_result.h"

namespace odc::train {

// One rank's totals over a run, for the summary table.
struct RankTotals {
  double compute_s = 0.0;   // minibatch time not spent waiting
  double gather_s = 0.0;
  double push_s = 0.0;
  double barrier_s = 0.0;
  double optimizer_s = 0.0;
  double microbatches = 0.0;
  double tokens = 0.0;
  double flops = 0.0;
};

// What a step's metrics line says besides the StepResult.
struct StepContext {
  std::int64_t epoch = 0;
  std::int64_t param_state_bytes = 0;  // this rank's masters, gradients and optimizer state
  distributed::CommResources comm;
};

// The warning for an MFU above 100% (a fraction `mfu` > 1; "" otherwise): the peak of
// `peak_flops` per rank was underestimated. `from_config`: it is train.peak_flops (raise it), else
// it was measured (set train.peak_flops, or let later runs raise the cached best: core/peak_cache.h).
std::string mfu_above_peak_warning(double mfu, double peak_flops, bool from_config);

class RunReport {
 public:
  // train.metrics_file ("m-{rank}.jsonl": one file per rank; without the placeholder only rank 0
  // writes), train.log_every; `peak_flops` per rank
  // (the MFU denominator), `gemm_flops` the measured GEMM rate per rank (0: not measured; the
  // summary's GEMM fraction is then left out). resumed_step: the step a resumed run continues
  // after (0 for a new run): the metrics file keeps its records up to that step, writes back
  // `unwritten_metrics` (this rank's lines its checkpoint kept: MetricsWriter) and goes on.
  RunReport(const TrainSettings& train, distributed::HostGroup& group, double peak_flops, double gemm_flops = 0.0,
            std::int64_t resumed_step = 0, const std::vector<std::string>& unwritten_metrics = {});

  void begin_run(std::int64_t first_step, std::int64_t last_step, std::int64_t total_steps);
  // After every step: the metrics line and this run's totals.
  void record(const StepResult& result, const StepContext& context);
  // After every evaluation: the log line (rank 0) and a metrics line with "eval_loss",
  // "eval_perplexity", "eval_tokens", "eval_sequences", "eval_s" and the step it followed.
  void record_eval(const EvalSummary& eval, double seconds);
  // After every online RL iteration's sampling: the log line (rank 0) and a metrics line of
  // `stats` (OnlineRollouts: reward mean and std, accuracy, completion lengths, times; its "step"
  // is the first step that trains on them).
  void record_rollouts(const nlohmann::json& stats);
  // The progress line, every train.log_every steps and at the last: step, loss, lr, gradient norm,
  // the global batch (sequences and tokens of this step), tokens/s, MFU, bubbles, ETA. An MFU above
  // 100% (here or in the summary) comes with a warning, once: the peak was underestimated.
  void progress(const StepResult& result);
  // Collective: the end-of-run summary (rank 0 logs it).
  void summary(double param_state_bytes) const;
  // Collective: every rank's trace events into one Chrome trace (train.trace_file) by rank 0.
  void write_trace(const Tracer& tracer, const nlohmann::json& other) const;
  // Collective: the metrics lines each rank could not write (MetricsWriter::unwritten), on rank 0
  // keyed by rank (ranks without any left out), for the checkpoint saved after the failure.
  std::map<int, std::vector<std::string>> gather_unwritten_metrics() const;

 private:
  distributed::HostGroup& group_;
  MetricsWriter metrics_;
  std::string trace_path_;
  double peak_flops_;
  double gemm_flops_;
  bool peak_from_config_ = false;   // train.peak_flops was set
  mutable bool warned_mfu_ = false;  // the MFU-above-100% warning is given once per run
  // Rank 0: warns (once) when `mfu` is above 1.
  void check_mfu(double mfu) const;
  std::int64_t log_every_ = 1;
  std::int64_t first_ = 0, last_ = 0, total_ = 0;
  std::chrono::steady_clock::time_point start_;
  // This run's running totals (constant memory over any number of steps).
  std::int64_t steps_ = 0;
  std::int64_t sequences_ = 0;  // global, over this run's steps
  double first_loss_ = 0.0, last_loss_ = 0.0, bubble_planned_sum_ = 0.0;
  RankTotals totals_;
};

// train.objective grpo: the policy objective's diagnostics (StepResult::Policy) over every rank's
// completion tokens, from this rank's sums and its completion NLL sum: sums added up, the ratio's
// extremes gathered (each rank's pair in its own slots of one all-reduce).
StepResult::Policy reduce_policy_metrics(distributed::HostGroup& group, const kernels::PolicyLossSums& local,
                                         double nll);

}  // namespace odc::train
