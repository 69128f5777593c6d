#pragma once
// Trainer: the minibatch loop. Every rank draws the same global minibatch (same seed), takes its
// share, packs it into microbatches under the token cap, runs them through the model against the
// Comm, then (after end_minibatch) clips by the global gradient norm and steps AdamW on the shards
// it owns. The loss is normalized over the *global* minibatch, so the gradient does not depend on
// how sequences were split into ranks and microbatches.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "odc/core/config.h"
#include "odc/core/trace.h"
#include "odc/data/dataset.h"
#include "odc/data/packing.h"
#include "odc/data/planner.h"
#include "odc/distributed/comm.h"
#include "odc/distributed/watchdog.h"
#include "odc/distributed/shard_store.h"
#include "odc/distributed/ucx_transport.h"
#include "odc/model/llama_model.h"
#include "odc/optim/lr_schedule.h"
#include "odc/optim/sharded_adamw.h"
#include "odc/train/metrics.h"
#include "odc/train/performance.h"

namespace odc::train {

struct StepResult {
  std::int64_t step = 0;
  double loss = 0.0;          // the objective: weighted mean NLL over the global minibatch
  double lr = 0.0;
  double grad_norm = 0.0;     // before clipping
  double tokens = 0.0;        // global tokens processed
  double target_tokens = 0.0; // global positions that carried loss
  int microbatches = 0;       // this rank's, including padding
  int padded_microbatches = 0;         // this rank's empty microbatches (collective baseline)
  int padded_microbatches_global = 0;  // summed over ranks
  double wait_gather_s = 0.0;          // this rank's waits for weight gathers (microbatch loop)
  double wait_push_s = 0.0;            // this rank's waits for gradient pushes (microbatch loop)
  double wait_barrier_s = 0.0;         // this rank's waits at the minibatch boundaries
  double wait_in_loop_s = 0.0;         // gather + push
  double wait_end_s = 0.0;             // = wait_barrier_s
  double compute_s = 0.0;              // this rank's minibatch time not spent waiting
  double optimizer_s = 0.0;            // this rank's optimizer step (clip + AdamW on its shards)
  double flops = 0.0;                  // this rank's model FLOPs (linear + causal attention)
  double mfu = 0.0;                    // all ranks' FLOPs / (ranks * step time * peak FLOP/s)
  double comm_thread_cpu_s = 0.0;      // CPU time of this rank's communication thread
  double bubble_planned = 0.0;         // the planner's estimate under this comm's barrier model
  double planned_cost = 0.0;           // the planner's cost of this rank's share
  double planned_cost_max = 0.0;       // the largest rank's
  double planned_makespan = 0.0;       // the plan's time in cost units under this comm's barriers
  double bubble_measured = 0.0;        // measured: communication waits / minibatch time, all ranks
  double minibatch_s = 0.0;            // this rank's minibatch (compute + waits), before the optimizer
  double seconds = 0.0;                // this rank's whole step
};

class Trainer {
 public:
  Trainer(const Config& config, int rank, int world_size);
  ~Trainer();

  // Runs to train.steps (or train.stop_at_step); every step is logged and written to the metrics
  // file. Returns every step's result when keep_results (tests compare losses step by step);
  // odc-train passes false so that a run of any length holds constant memory (the end-of-run
  // summary keeps running totals).
  std::vector<StepResult> run(bool keep_results = true);
  // One optimizer step on the next global minibatch.
  StepResult step();

  const model::LlamaModel& model() const { return *model_; }
  distributed::ShardStore& store() { return *store_; }
  std::int64_t token_cap() const { return token_cap_; }
  // Optimizer steps done so far (including those of a checkpoint this run resumed from).
  std::int64_t steps_done() const { return step_; }
  // The checkpoint this trainer resumed from (empty when it started fresh).
  const std::string& resumed_from() const { return resumed_from_; }
  // Fingerprint of the last step's global plan (identical on every rank).
  std::uint64_t last_plan_hash() const { return last_plan_hash_; }

 private:
  void build_microbatch(const std::vector<std::int64_t>& seq_indices, const std::vector<float>& weights,
                        model::PackedBatch& out) const;
  // Running totals of a run for the end-of-run summary.
  struct RunTotals {
    std::int64_t steps = 0;
    double first_loss = 0.0;
    double last_loss = 0.0;
    double bubble_planned_sum = 0.0;
    void add(const StepResult& r);
  };
  void log_summary(const RunTotals& run, double elapsed) const;
  void write_trace() const;
  // Native checkpoints (io/native_checkpoint.h): every rank writes its shards, rank 0 commits.
  void save_checkpoint();
  void load_checkpoint(const std::string& path);
  // Writes the model as a Hugging Face directory (rank 0; every rank sends its shards).
  void export_hf(const std::string& dir);
  void barrier();
  // Tells the watchdog what this rank does now (peers ask when they are stuck waiting for it).
  void announce(std::string activity);

  const Config config_;  // a copy: the trainer must not depend on the caller keeping it alive
  int rank_;
  int world_size_;
  model::LlamaConfig model_config_;
  // Names unresponsive peers when an MPI wait outlives comm.timeout_s (multi-rank runs); the
  // comms hold a pointer to it: declared before them.
  std::unique_ptr<distributed::Watchdog> watchdog_;
  std::unique_ptr<data::TokenDataset> dataset_;
  std::unique_ptr<data::Sampler> sampler_;
  std::unique_ptr<model::LlamaModel> model_;
  std::unique_ptr<distributed::UcxTransport> transport_;  // owns the masters' memory under ODC: before store_
  std::unique_ptr<distributed::ShardStore> store_;
  std::unique_ptr<distributed::Comm> comm_;
  std::unique_ptr<optim::ShardedAdamW> optimizer_;
  optim::LrSchedule schedule_;
  MetricsWriter metrics_;
  std::int64_t token_cap_ = 0;
  std::int64_t minibatch_size_ = 0;
  std::int64_t step_ = 0;
  double grad_clip_ = 0.0;
  bool sequence_reduction_ = false;
  bool pad_microbatches_ = false;  // collective comms need equal microbatch counts
  double delay_s_ = 0.0;           // injected per-microbatch delay on this rank (debug)
  data::Balance balance_ = data::Balance::lb_mini;
  bool round_robin_ = false;  // data.balance = round_robin: no planner
  data::CostModel cost_model_;
  std::uint64_t last_plan_hash_ = 0;
  model::PackedBatch batch_;  // reused across microbatches
  std::unique_ptr<Tracer> tracer_;  // null unless train.trace_file is set
  std::int64_t trace_steps_ = 0;
  double peak_flops_ = 0.0;         // one rank's, for MFU
  RankTotals totals_;               // this rank's, for the summary
  std::uint64_t data_fingerprint_ = 0;
  std::string checkpoint_dir_;
  std::int64_t checkpoint_every_ = 0;
  std::string resumed_from_;
  std::string source_architecture_;   // of model.checkpoint, when training started from one
  std::optional<DType> source_dtype_;
};

}  // namespace odc::train
