#pragma once
// What one optimizer step did, as the trainer measured it: the objective and the optimizer's
// inputs, this rank's work and waits, and the plan's estimates. The run report turns it into the
// metrics line and the progress line; tests compare it step by step.
#include <cstdint>

namespace odc::train {

struct StepResult {
  std::int64_t step = 0;
  double loss = 0.0;          // the objective: weighted mean NLL over the global minibatch (grpo: its value)
  double lr = 0.0;
  double grad_norm = 0.0;     // before clipping
  std::int64_t sequences = 0; // sequences of the global minibatch (an epoch's last step may have fewer)
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
  double gemm_fraction = 0.0;          // the same over the measured GEMM rate (0: not measured)
  double comm_thread_cpu_s = 0.0;      // CPU time of this rank's communication thread
  double bubble_planned = 0.0;         // the planner's estimate under this comm's barrier model
  double planned_cost = 0.0;           // the planner's cost of this rank's share
  double planned_cost_max = 0.0;       // the largest rank's
  double planned_makespan = 0.0;       // the plan's time in cost units under this comm's barriers
  double bubble_measured = 0.0;        // measured: communication waits / minibatch time, all ranks
  double minibatch_s = 0.0;            // this rank's minibatch (compute + waits), before the optimizer
  double seconds = 0.0;                // this rank's whole step
  double local_tokens = 0.0;           // this rank's tokens
  int split_microbatches = 0;          // this rank's microbatches split over a context group
  double context_exchange_s = 0.0;     // this rank's time in their exchanges (inside compute_s)
  // train.objective grpo, over the minibatch's completion tokens (all ranks): `loss` is then the
  // objective's value, and these its diagnostics.
  struct Policy {
    bool on = false;
    double nll = 0.0;            // mean NLL of the completion tokens under the weights before the step
    double entropy = 0.0;        // mean softmax entropy (rl.entropy; 0 when off)
    double kl = 0.0;             // mean k3 estimate of the KL to the reference (0 without ref_logprobs)
    double ratio_mean = 0.0;     // mean of r = exp(logp - old logp)
    double ratio_min = 0.0, ratio_max = 0.0;
    double clip_low = 0.0;       // fraction of tokens with r < 1 - epsilon and A < 0
    double clip_high = 0.0;      // fraction with r > 1 + epsilon_high and A > 0
  } policy;
};

}  // namespace odc::train
