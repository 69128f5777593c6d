#pragma once
// MinibatchSource: the data side of a training step. Every rank draws the same global minibatch
// from the seeded sampler, the planner splits it over the ranks and packs each share into
// microbatches under the token cap, and every sequence gets its loss weight, normalized over the
// *global* minibatch — so the gradient does not depend on how sequences were split into ranks and
// microbatches, and no rank needs to communicate to learn any of it.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "odc/core/config.h"
#include "odc/train/config/run_settings.h"
#include "odc/data/dataset.h"
#include "odc/data/packing.h"
#include "odc/data/planner.h"
#include "odc/distributed/comm/comm.h"
#include "odc/model/batch.h"
#include "odc/model/llama_config.h"

namespace odc::train {

struct Minibatch {
  std::vector<std::int64_t> global;  // dataset indices of the global minibatch, in sampler order
  data::Plan plan;                   // every rank's microbatches (items index `global`)
  std::vector<float> weights;        // per global item: the loss weight of each of its targets
  double normalizer = 0.0;           // target tokens (or sequences with targets) of the minibatch
  // This rank's microbatches; with `equal_counts`, padded with empty ones to the most of any rank
  // whose comm runs the same collectives (set_equal_count_ranks; all ranks unless set).
  std::vector<std::vector<std::int64_t>> mine;
  int padded = 0;                    // empty microbatches appended to `mine`
  // Per microbatch of `mine`, its split over a context-parallel group (model/context_split.h;
  // inactive: an ordinary microbatch). ODC: the plan's groups this rank belongs to come first, one
  // sequence each; the collective's static degree: every microbatch, over this rank's group.
  std::vector<model::ContextSplit> context;
  // grpo: every advantage of the minibatch is 0 (while the data has others; else one warning at load).
  bool zero_advantages = false;
  bool zero_advantages_rounded = false;  // some of them from rewards that differ (zero_advantages_reason)
};

// Why a minibatch (or a whole set of rollouts) whose advantages are all 0 trains nothing, for
// warnings: the rewards of each group are equal, or (`rounded`) some differ by less than a float
// advantage holds after rl.scale_rewards (1e-300 beside 0: (reward - mean) / (std + 1e-4) is 0 in float).
std::string zero_advantages_reason(bool rounded);

class MinibatchSource {
 public:
  // Opens data.train, applies data.max_length (data.over_length) and checks the data against the
  // model (its attention window) and the world (global batch, token cap). `comm` decides what
  // data.balance = auto means and whether lb_mini and lb_mini_equal are possible. `auto_token_cap`:
  // what data.max_tokens_per_microbatch: auto resolves to (the memory plan's; 0 when not planned).
  // `settings`: the run's data.*, model.checkpoint and train.* values; `config`: the cost model's,
  // token cap's and batch schedule's keys (read by their own functions, which name their origins).
  // With rl.prompts (the online RL loop) no data is read: `online_max_length` (the longest rollout
  // the loop can sample) sizes the token cap, and each iteration's rollouts arrive through
  // set_rollouts.
  MinibatchSource(const RunSettings& settings, const Config& config, const model::LlamaConfig& model, int rank,
                  int world_size, distributed::CommKind comm, std::int64_t auto_token_cap = 0,
                  std::int64_t online_max_length = 0);

  // The online loop: the next iteration's rollouts (every rank the same), drawn from in the order of
  // a sampler seeded with `order_seed` (data.shuffle). odc::Error for a rollout over the token cap
  // or records the objective cannot train (as for data.train's).
  void set_rollouts(std::unique_ptr<data::TokenDataset> rollouts, std::uint64_t order_seed);
  // Whether there is data to draw from (the online loop has none before its first iteration).
  bool has_data() const { return dataset_ != nullptr; }

  // The next global minibatch and its plan: global_batch_size() sequences, or with train.epochs
  // no more than the current epoch has left (its last step trains the remainder). A step whose
  // sequences lb_micro or lb_mini_equal cannot split evenly (only such a last step can be one) is
  // planned with local_sort.
  Minibatch next(bool equal_counts);
  // Which ranks run collectives together (group_of_rank[r]: rank r's group; hybrid sharding: its
  // host): lb_micro equalizes microbatch counts, and `equal_counts` pads, only within a group.
  // By default all ranks form one group.
  void set_collective_groups(std::vector<int> group_of_rank);
  // Packs microbatch `m` of this rank's share into `out` (reused across microbatches).
  void build(const Minibatch& minibatch, std::size_t m, model::PackedBatch& out) const;

  const data::TokenDataset& dataset() const { return *dataset_; }
  data::Sampler& sampler() { return *sampler_; }
  std::int64_t global_batch_size() const { return global_batch_; }  // sequences per full step
  // How global_batch_size() was given ("data.global_batch_size", "data.minibatch_size 4 x 2 ranks").
  const std::string& global_batch_origin() const { return global_batch_origin_; }
  std::int64_t token_cap() const { return token_cap_; }
  data::Balance balance() const { return balance_; }
  const data::CostModel& cost_model() const { return cost_model_; }
  // Context parallelism (train.context_parallel): whether a microbatch may be split over several
  // ranks, and the most rows of whole sequences one split microbatch holds (what the exchange's
  // buffers are sized for). The collective's static degree (1: none).
  bool may_split() const { return max_split_rows_ > 0; }
  std::int64_t max_split_rows() const { return max_split_rows_; }
  int context_degree() const { return context_degree_; }
  // Fingerprint of every sequence's tokens and mask (reads the whole dataset).
  std::uint64_t fingerprint() const;

 private:
  // Sets out.context from the plan (and, ODC, puts this rank's groups first in out.mine).
  void split_microbatches(Minibatch& out) const;
  // Appends item i of the minibatch (its whole sequence) to `out`.
  void append_sequence(const Minibatch& minibatch, std::int64_t i, model::PackedBatch& out) const;
  // train.objective grpo: every record a rollout, of rl.temperature, with ref_logprobs for
  // rl.kl_beta, within dr_grpo's length; `name` is the data's in messages.
  void check_policy_records(const std::string& name);
  // data.train opened in data.format, data.max_length applied (what it dropped or cut is logged).
  static std::unique_ptr<data::TokenDataset> open_limited(const RunSettings& settings, std::int64_t vocab_size);
  int rank_;
  int world_size_;
  std::vector<int> group_of_rank_;  // empty: one group
  std::unique_ptr<data::TokenDataset> dataset_;
  std::unique_ptr<data::Sampler> sampler_;
  bool all_advantages_zero_ = false;  // grpo: the whole dataset's (warned once)
  std::int64_t global_batch_ = 0;
  std::string global_batch_origin_;
  bool within_epochs_ = false;  // train.epochs: no step crosses an epoch's end
  std::int64_t token_cap_ = 0;
  bool sequence_reduction_ = false;
  // train.objective grpo: rl.loss_aggregation and the dr_grpo length (rl.max_completion_length, or
  // the data's longest completion).
  bool policy_ = false;
  bool online_ = false;        // rl.prompts: the rollouts come through set_rollouts
  double temperature_ = 1.0;   // rl.temperature
  double kl_beta_ = 0.0;       // rl.kl_beta
  bool shuffle_ = true;        // data.shuffle
  std::string aggregation_;
  std::int64_t completion_length_ = 0;
  data::Balance balance_ = data::Balance::lb_mini;
  data::CostModel cost_model_;
  // Context parallelism: dynamic groups (ODC) up to max_context_degree_ ranks, or the collective's
  // static degree; max_split_rows_ as may_split() says.
  bool context_dynamic_ = false;
  int max_context_degree_ = 0;
  int context_degree_ = 1;
  std::int64_t max_split_rows_ = 0;
  // Sets the above from train.context_parallel* once the longest sequence is known; odc::Error for
  // a sequence no allowed group fits (`describe(i)` names sequence i).
  void plan_context(const RunSettings& settings, distributed::CommKind comm, std::int64_t longest);
};

}  // namespace odc::train
