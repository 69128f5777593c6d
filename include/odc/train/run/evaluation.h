#pragma once
// Evaluation during training: the token-weighted mean next-token cross-entropy of the model on a
// held-out dataset (data.eval), and its perplexity exp(loss), computed by every rank together.
//
// The eval sequences (all of data.eval, or its first data.eval_max_sequences) are split over the
// ranks round-robin (sequence i to rank i mod world), each rank packs its share in order into
// microbatches under the training token cap (a longer sequence gets one of its own), and runs them
// forward only — no gradients, no optimizer — through the training Comm, so the weights come from
// the same ODC gathers or collective all-gathers as training. Every rank knows every rank's
// microbatch count, so a comm that needs equal counts (the collective baseline) pads short ranks
// with empty microbatches, as training does; ODC runs the counts as they are. One all-reduce over
// the HostGroup sums the negative log-likelihoods, the target tokens and the sequences.
//
// The loss definition and masking are training's: targets are the positions whose loss_mask is
// set (chat: the assistant turns), each weighted 1, so the result is the same number `odc-eval`
// (train::evaluate) reports for the same weights and data, on any world size and either comm.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "odc/data/dataset.h"
#include "odc/distributed/comm/comm.h"
#include "odc/distributed/group/host_group.h"
#include "odc/model/batch.h"
#include "odc/model/llama_model.h"
#include "odc/train/config/run_settings.h"

namespace odc::train {

// One evaluation's result (identical on every rank).
struct EvalSummary {
  std::int64_t step = 0;       // optimizer steps done when it ran
  double loss = 0.0;           // mean nll over the target tokens (nats)
  double perplexity = 0.0;     // exp(loss)
  double tokens = 0.0;         // target tokens scored
  std::int64_t sequences = 0;  // sequences scored
};

class Evaluator {
 public:
  // Whether the run asks for evaluation (data.eval set).
  static bool configured(const RunSettings& settings) { return !settings.data.eval.empty(); }
  // Opens data.eval with data.train's format, tokenizer and chat template; odc::Error naming
  // data.eval and the path when the file is not there or holds no target token. `token_cap`:
  // the training microbatch cap. Checked before any training runs.
  Evaluator(const RunSettings& settings, const model::LlamaConfig& model, int rank, int world_size,
            std::int64_t token_cap);

  // An evaluation is due after `step` (train.eval_every), short of the run's last step (the end
  // of the run always evaluates).
  bool due(std::int64_t step, std::int64_t last_step) const;

  // Collective: every rank runs its share forward through `comm` and the sums are combined over
  // `group`. The comm must be between minibatches (this brackets the work in begin/end_minibatch).
  // `backend`: the one the model computes on (lent by the trainer; its queued work is waited for).
  EvalSummary run(model::LlamaModel& model, backend::Backend& backend, distributed::Comm& comm,
                  distributed::HostGroup& group, std::int64_t step);

  const data::TokenDataset& dataset() const { return *dataset_; }
  std::int64_t sequences() const { return count_; }
  // This rank's microbatches (dataset indices) and the most any rank has.
  const std::vector<std::vector<std::int64_t>>& microbatches() const { return mine_; }
  std::size_t max_microbatches() const { return most_; }

 private:
  std::unique_ptr<data::TokenDataset> dataset_;
  std::int64_t count_ = 0;
  std::int64_t every_ = 0;
  std::vector<std::vector<std::int64_t>> mine_;
  std::size_t most_ = 0;
  model::PackedBatch batch_;  // reused across microbatches
};

}  // namespace odc::train
