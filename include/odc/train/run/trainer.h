#pragma once
// Trainer: the minibatch loop. Every rank draws the same global minibatch (MinibatchSource), runs
// its share of microbatches through the model against the Comm, then (after end_minibatch) clips
// by the global gradient norm and steps AdamW on the shards it owns. The loss is normalized over
// the *global* minibatch, so the gradient does not depend on how sequences were split into ranks
// and microbatches.
//
// The parts: MinibatchSource (data, plan, loss weights), the model, the CommStack (sharded state +
// comm, comm_factory.h), the optimizer, Checkpointer (save/resume), RunReport (metrics, progress,
// summary, trace) and export_hf. Every exchange between ranks goes through the HostGroup.
// A StepSource (step_source.h) may supply the steps' data instead of data.train: the online RL
// loop (rl/online_rl_loop.h) drives the steps so, and the Trainer knows nothing of RL.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "odc/core/config.h"
#include "odc/core/trace.h"
#include "odc/distributed/comm/comm_factory.h"
#include "odc/distributed/group/host_group.h"
#include "odc/distributed/transport/context/context_exchange.h"
#include "odc/model/llama_model.h"
#include "odc/optim/lr_schedule.h"
#include "odc/optim/sharded_adamw.h"
#include "odc/train/config/batch_schedule.h"
#include "odc/train/checkpoint/checkpointing.h"
#include "odc/train/run/evaluation.h"
#include "odc/train/plan/memory_plan.h"
#include "odc/train/run/minibatch_source.h"
#include "odc/train/run/timed_exchange.h"
#include "odc/train/checkpoint/model_export.h"
#include "odc/train/run/run_report.h"
#include "odc/train/config/run_settings.h"
#include "odc/train/run/step_result.h"
#include "odc/train/run/step_source.h"
#include "odc/train/run/stop_signals.h"

namespace odc::train {

class Trainer {
 public:
  // A run over `group` (every rank constructs its Trainer collectively).
  // `source`, when given, makes the source of the steps' data (required with rl.prompts:
  // OnlineRlLoop::factory()).
  Trainer(const Config& config, distributed::HostGroup& group, StepSourceFactory source = {});
  // A run on one rank, in this process.
  explicit Trainer(const Config& config, StepSourceFactory source = {});
  ~Trainer();

  // Runs to train.steps (or the steps of train.epochs, or train.stop_at_step); every step is logged and written to the metrics
  // file. Returns every step's result when keep_results (tests compare losses step by step);
  // odc-train passes false so that a run of any length holds constant memory. With `signals`
  // (odc-train's, made before any thread), a stop signal on any rank ends the run gracefully
  // after the current step: a checkpoint (with checkpoint.dir) and a normal return.
  std::vector<StepResult> run(bool keep_results = true, const StopSignals* signals = nullptr);
  // One optimizer step on the next global minibatch.
  StepResult step();
  // Collective: evaluates the current weights on data.eval (evaluation.h), logs it and writes its
  // metrics line; odc::Error without data.eval. run() calls it every train.eval_every steps and at
  // the end, and keeps the best-checkpoint record.
  EvalSummary evaluate();
  // The latest evaluation of this run, if any.
  const std::optional<EvalSummary>& last_eval() const { return last_eval_; }

  const model::LlamaModel& model() const { return *model_; }
  distributed::ShardStore& store() { return comm_->store(); }

  // What a StepSource drives the steps with: the model, its backend and the comm (sampling with
  // the current weights), the group, the settings; the data it trains on from the next step
  // (`dataset`, with data.seed's order); its own metrics line (RunReport::record_rollouts).
  model::LlamaModel& model() { return *model_; }
  backend::Backend& backend() { return *backend_; }
  distributed::Comm& comm() { return comm_->comm(); }
  distributed::HostGroup& group() { return group_; }
  const RunSettings& settings() const { return settings_; }
  void train_on(std::unique_ptr<data::TokenDataset> dataset);
  void record_rollouts(const nlohmann::json& stats);
  // The layout train.sharding gave this job (its hosts, the shards' group, the replicas).
  const distributed::ShardingPlan& sharding() const { return sharding_; }
  std::int64_t token_cap() const { return data_->token_cap(); }
  // The run's length: train.steps, or the steps train.epochs takes over this data and batch.
  const RunLength& length() const { return length_; }
  // The learning rate of every step (warmup and decay resolved).
  const optim::LrSchedule& schedule() const { return schedule_; }
  // Optimizer steps done so far (including those of a checkpoint this run resumed from).
  std::int64_t steps_done() const { return step_; }
  // The checkpoint this trainer resumed from (empty when it started fresh).
  const std::string& resumed_from() const { return resumed_from_; }
  // Fingerprint of the last step's global plan (identical on every rank).
  std::uint64_t last_plan_hash() const { return last_plan_hash_; }

 private:
  // `group`, or when null the group this trainer owns.
  Trainer(const Config& config, std::unique_ptr<distributed::HostGroup> own_group, distributed::HostGroup* group,
          StepSourceFactory source);
  // The constructor's builders (trainer_setup.cpp), in their order.
  void make_backend();
  void probe_outputs() const;
  std::string open_checkpoints();  // the checkpoint directory's lock and the run's identity: the resume path
  void make_data();                // the memory plan, the data (and the eval data), or the run refused
  void make_model();
  void check_ranks_agree();        // the same configuration, model and data on every rank
  void make_comm(bool loads_weights);
  void make_context_exchange();
  void make_optimizer();           // and the run's length and LR schedule
  InitialState initial_state(const std::string& resume);
  void make_report(const InitialState& initial);  // the MFU denominator, the RunReport, the tracer
  void log_start() const;
  // `unwritten_metrics`: the metrics lines the ranks could not write, kept in the checkpoint.
  void save_checkpoint(std::map<int, std::vector<std::string>> unwritten_metrics = {});
  void log_memory_check();
  // After an evaluation of step_: the best-checkpoint record (`checkpointed`: step_ has a checkpoint).
  void track_best(bool checkpointed);
  // A metrics line that could not be written (disk full) ends the run, after a checkpoint.
  void record_metrics(const std::function<void()>& write);
  [[noreturn]] void end_on_metrics_failure(double failed_ranks, bool saved);
  nlohmann::json trace_metadata() const;
  // What this run trains on: the dataset, or the step source's data.
  std::string data_description() const;

  const Config config_;  // a copy: the trainer must not depend on the caller keeping it alive
  std::unique_ptr<distributed::HostGroup> own_group_;  // the single-rank constructor's
  distributed::HostGroup& group_;
  RunSettings settings_;  // every key this run reads, resolved once (run_settings.h)
  model::LlamaConfig model_config_;
  // The compute backend, made before the model and lent to it, the comm, the optimizer (through
  // the store) and the evaluator; declared before them, so it outlives them.
  std::unique_ptr<backend::Backend> backend_;
  std::unique_ptr<StepSource> step_source_;  // the steps' data, when not data.train (the online RL loop)
  std::unique_ptr<MinibatchSource> data_;
  std::unique_ptr<Evaluator> evaluator_;  // null unless data.eval is set
  std::optional<EvalSummary> last_eval_;
  std::unique_ptr<model::LlamaModel> model_;
  distributed::ShardingPlan sharding_;  // train.sharding over this job's hosts
  std::unique_ptr<distributed::CommStack> comm_;
  std::unique_ptr<distributed::GroupContextExchange> context_exchange_;  // null unless a microbatch may be split
  std::unique_ptr<TimedContextExchange> timed_exchange_;                 // the model's view of it
  std::unique_ptr<optim::ShardedAdamW> optimizer_;
  RunLength length_;  // train.steps, or train.epochs over this dataset and batch
  optim::LrSchedule schedule_;
  std::unique_ptr<Checkpointer> checkpointer_;
  std::unique_ptr<RunReport> report_;
  std::unique_ptr<Tracer> tracer_;  // null unless train.trace_file is set
  std::int64_t step_ = 0;
  std::int64_t first_step_ = 0;     // this run's first step (a resume's): no update before it
  double delay_s_ = 0.0;            // injected per-microbatch delay on this rank (debug)
  double peak_flops_ = 0.0;         // one rank's, for MFU
  double gemm_flops_ = 0.0;         // one rank's measured GEMM rate (0: not measured)
  std::uint64_t last_plan_hash_ = 0;
  std::uint64_t data_fingerprint_ = 0;
  std::string resumed_from_;
  std::string metrics_error_;       // this rank's first failed metrics write (MetricsWriteError)
  ModelSource source_;              // of model.checkpoint, when training started from one
  model::PackedBatch batch_;        // reused across microbatches
  MemoryPlan memory_plan_;          // this rank's, at the run's token cap
  std::int64_t baseline_rss_ = 0;   // the resident set just before the model was built
  backend::PeakFlops measured_;     // the device's peak and GEMM rate, when measured (not train.peak_flops)
  backend::DeviceDescription device_;
};

}  // namespace odc::train
