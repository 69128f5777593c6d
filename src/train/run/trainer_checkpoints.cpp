// The Trainer's checkpoints: saving one (with what its step source keeps: the online RL loop's
// rollouts in the middle of an iteration), the best-checkpoint record after an evaluation, and the end of a run whose metrics
// file could not be written (its state saved first, the unwritten lines kept for the resume).
#include <spdlog/spdlog.h>

#include "odc/core/error.h"
#include "odc/core/hash.h"
#include "odc/train/run/trainer.h"

namespace odc::train {

void Trainer::record_metrics(const std::function<void()>& write) {
  try {
    write();
  } catch (const MetricsWriteError& e) {
    if (metrics_error_.empty()) metrics_error_ = e.what();
  }
}

// Every rank, after `failed_ranks` ranks could not write their metrics line: the state after
// step_ is consistent (the optimizer step is done), so it is saved (unless `saved` already), with
// the lines not written (a resume writes them back), before the run ends with the failing rank's
// message (exit 1). A rollback would lose the steps since the last checkpoint for a full disk the
// metrics file shares with nothing else.
void Trainer::end_on_metrics_failure(double failed_ranks, bool saved) {
  std::string outcome = "no checkpoint.dir is set, so nothing is saved";
  if (checkpointer_->enabled()) {
    if (!saved) {
      try {
        save_checkpoint(report_->gather_unwritten_metrics());
      } catch (const Error& e) {
        fail("{} after step {}; saving a checkpoint of step {} failed too: {}",
             metrics_error_.empty() ? "another rank's train.metrics_file could not be written" : metrics_error_, step_,
             step_, e.what());
      }
    }
    outcome = fmt::format("a checkpoint of step {} is saved in checkpoint.dir '{}': free space, then resume with "
                          "checkpoint.resume: auto", step_, settings_.checkpoint.dir);
  }
  if (metrics_error_.empty()) {
    fail("the train.metrics_file of {} other rank(s) could not be written after step {} (see its error); {}",
         failed_ranks, step_, outcome);
  }
  fail("{} after step {}; {}", metrics_error_, step_, outcome);
}

// The best-checkpoint record (best_checkpoint.h) after the evaluation of step_: `checkpointed`
// says whether a checkpoint of step_ exists.
void Trainer::track_best(bool checkpointed) {
  const EvalSummary& eval = *last_eval_;
  if (!checkpointer_->enabled() || !checkpointer_->is_new_best(eval.loss)) return;
  if (!checkpointed && checkpointer_->save_best()) {
    save_checkpoint();
    checkpointed = true;
  }
  if (checkpointed) {
    checkpointer_->record_best({"", eval.step, eval.loss, eval.perplexity, eval.tokens});
  } else if (group_.is_root()) {
    spdlog::info("eval after step {}: the lowest eval loss so far, but step {} has no checkpoint "
                 "(checkpoint.save_best: false): the best-checkpoint record is unchanged", eval.step, eval.step);
  }
}

void Trainer::save_checkpoint(std::map<int, std::vector<std::string>> unwritten_metrics) {
  TrainingManifest manifest;
  manifest.unwritten_metrics = std::move(unwritten_metrics);
  manifest.comm = std::string(comm_->comm().name());
  manifest.optimizer_steps = optimizer_->steps_taken();
  manifest.sampler = data_->sampler().state();
  manifest.data_fingerprint = fingerprint_hex(data_fingerprint_);
  manifest.dataset = data_description();
  manifest.model_config = model_config_.to_json();
  manifest.config = config_.dump();
  manifest.global_minibatch = data_->global_batch_size();
  manifest.source_architecture = source_.architecture;
  if (source_.dtype) manifest.source_dtype = std::string(dtype_name(*source_.dtype));
  std::vector<std::pair<std::string, std::string>> files;
  if (step_source_) step_source_->checkpoint(step_, manifest, files);  // e.g. mid-iteration rollouts
  checkpointer_->save(step_, manifest, store(), files);
}

}  // namespace odc::train
