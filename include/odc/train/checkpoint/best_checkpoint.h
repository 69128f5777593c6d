#pragma once
// The best checkpoint of a run: the checkpoint whose evaluation (train/run/evaluation.h) had the
// lowest eval loss so far, recorded in checkpoint.dir/best.json and kept by checkpoint.keep's
// pruning (io::commit_checkpoint's `protect_step`).
//
//   best.json  {"run_id": ..., "step": N, "checkpoint": "step-N", "eval_loss": x,
//               "eval_perplexity": y, "eval_tokens": t}
//
// Only a step that has a checkpoint is ever recorded, so best.json always names a checkpoint that
// is there. An evaluation on a step without one (train.eval_every not a multiple of
// checkpoint.every) saves a checkpoint at that step when it is a new best and checkpoint.save_best
// is true; otherwise it is logged and best.json stays as it was. The file belongs to one run: a
// resumed run continues its record (a record of a later step than the resume point is an
// abandoned branch's after a rollback and is ignored, as is another run's).
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace odc::train {

struct BestCheckpoint {
  std::string run_id;
  std::int64_t step = 0;
  double eval_loss = 0.0;
  double eval_perplexity = 0.0;
  double eval_tokens = 0.0;

  nlohmann::json to_json() const;
  // odc::Error naming `where` for a missing or mistyped field.
  static BestCheckpoint from_json(const nlohmann::json& json, const std::string& where);
};

// checkpoint.dir/best.json.
std::string best_record_path(const std::string& dir);

// The record in `dir` that this run continues: run `run_id`'s, of a step <= `through_step` whose
// checkpoint directory is still there; nullopt otherwise (no file, another run's, an abandoned
// branch's, a pruned or retired checkpoint). A file that does not parse is an odc::Error.
std::optional<BestCheckpoint> read_best_checkpoint(const std::string& dir, const std::string& run_id,
                                                   std::int64_t through_step);

// Writes `dir`/best.json atomically.
void write_best_checkpoint(const std::string& dir, const BestCheckpoint& best);

}  // namespace odc::train
