#include "odc/train/trainer.h"

#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <thread>

#include <spdlog/spdlog.h>

#include "odc/core/error.h"
#include "odc/core/hash.h"
#include "odc/dist/bootstrap.h"
#include "odc/dist/collective_comm.h"
#include "odc/dist/local_comm.h"
#include "odc/dist/odc_comm.h"
#include "odc/kernels/matmul.h"
#include "odc/train/config_schema.h"

namespace odc::train {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024.0;
}

std::uint64_t dataset_fingerprint(const data::TokenDataset& dataset) {
  Fnv1a h;
  for (std::int64_t i = 0; i < dataset.size(); ++i) {
    const auto seq = dataset.get(i);
    h.add(seq.tokens.data(), seq.tokens.size_bytes()).add(seq.target_mask.data(), seq.target_mask.size_bytes());
  }
  return h.value();
}

// "metrics-{rank}.jsonl" gives every rank its own file; without the placeholder only rank 0 writes.
std::string metrics_path(const std::string& pattern, int rank) {
  const auto at = pattern.find("{rank}");
  if (at == std::string::npos) return rank == 0 ? pattern : std::string();
  return pattern.substr(0, at) + std::to_string(rank) + pattern.substr(at + 6);
}

// No balancing: rank r takes items r, r+N, ... and packs them in order under the cap. Ranks may
// end up with different microbatch counts (the collective baseline then pads).
data::Plan round_robin_plan(const data::PlanInput& input) {
  data::Plan plan;
  plan.ranks.resize(static_cast<std::size_t>(input.world_size));
  for (int r = 0; r < input.world_size; ++r) {
    std::vector<std::int64_t> items, lengths;
    for (std::size_t i = static_cast<std::size_t>(r); i < input.lengths.size(); i += static_cast<std::size_t>(input.world_size)) {
      items.push_back(static_cast<std::int64_t>(i));
      lengths.push_back(input.lengths[i]);
    }
    auto& rank = plan.ranks[static_cast<std::size_t>(r)];
    for (const auto& microbatch : data::pack_in_order(lengths, input.token_cap)) {
      std::vector<std::int64_t> global_items;
      double cost = 0.0;
      for (auto i : microbatch) {
        global_items.push_back(items[static_cast<std::size_t>(i)]);
        cost += input.cost.cost(lengths[static_cast<std::size_t>(i)]);
      }
      rank.microbatches.push_back(std::move(global_items));
      rank.microbatch_costs.push_back(cost);
      rank.cost += cost;
    }
  }
  return plan;
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
}  // namespace

Trainer::Trainer(const Config& config, int rank, int world_size)
    : config_(config),
      rank_(rank),
      world_size_(world_size),
      model_config_(model_config_from(config)),
      metrics_(metrics_path(config.get_string("train.metrics_file"), rank)) {
  const auto threads = config.get_int("train.threads");
  if (threads < 1) fail("train.threads must be at least 1, found {}", threads);
  kernels::cpu::set_num_threads(static_cast<int>(threads));

  dataset_ = data::open_dataset(config.get_string("data.train"), config.get_string("data.format"),
                                model_config_.vocab_size);
  minibatch_size_ = config.get_int("data.minibatch_size");
  if (minibatch_size_ < 1) fail("data.minibatch_size must be at least 1, found {}", minibatch_size_);
  const std::int64_t global = minibatch_size_ * world_size_;
  if (global > dataset_->size()) {
    fail("data.minibatch_size {} x {} ranks = {} sequences per step, but {} holds only {}", minibatch_size_,
         world_size_, global, dataset_->describe(), dataset_->size());
  }

  // Token cap: explicit, or the longest sequence of the dataset scaled by packing_ratio.
  token_cap_ = config.get_int("data.max_tokens_per_microbatch");
  if (token_cap_ < 0) fail("data.max_tokens_per_microbatch must be >= 0, found {}", token_cap_);
  if (token_cap_ == 0) {
    const double ratio = config.get_double("data.packing_ratio");
    if (!(ratio > 0)) fail("data.packing_ratio must be positive, found {}", ratio);
    token_cap_ = static_cast<std::int64_t>(std::floor(static_cast<double>(dataset_->max_length()) * ratio));
  }
  for (std::int64_t i = 0; i < dataset_->size(); ++i) {
    if (dataset_->length(i) > token_cap_) {
      fail("{}: sequence {} has length {}, which exceeds the microbatch cap "
           "data.max_tokens_per_microbatch = {}", dataset_->describe(), i, dataset_->length(i), token_cap_);
    }
  }
  if (dataset_->max_length() > model_config_.max_position_embeddings) {
    spdlog::warn("longest sequence ({} tokens) exceeds model.config.max_position_embeddings = {}",
                 dataset_->max_length(), model_config_.max_position_embeddings);
  }
  sampler_ = std::make_unique<data::Sampler>(dataset_->size(), static_cast<std::uint64_t>(config.get_int("data.seed")),
                                             config.get_bool("data.shuffle"));

  model_ = std::make_unique<model::LlamaModel>(model_config_);
  if (world_size_ > 1) {
    // Every rank must train the same thing: compare fingerprints before any collective that
    // would otherwise hang or silently mix different inputs.
    dist::check_identical_across_ranks({{"the configuration", fnv1a64(config.canonical())},
                                        {"the model config", fnv1a64(model_config_.to_json().dump())},
                                        {"the dataset " + dataset_->describe(), dataset_fingerprint(*dataset_)}});
    check_world_size(model_->units(), world_size_);
  }
  dist::ShardLayout layout(model_->units(), world_size_, rank_);
  const auto seed = static_cast<std::uint64_t>(config.get_int("model.seed"));
  const std::string comm_name = config.get_string("train.comm");
  const std::string balance = config.get_string("data.balance");
  round_robin_ = balance == "round_robin";
  if (!round_robin_) {
    balance_ = data::parse_balance(balance == "auto" ? (comm_name == "odc" ? "lb_mini" : "lb_micro") : balance);
  }
  if (!round_robin_ && balance_ == data::Balance::lb_mini && comm_name == "collective" && world_size_ > 1) {
    fail("data.balance = lb_mini needs train.comm = odc: LB-Mini gives ranks different numbers of microbatches, "
         "which collectives cannot run (use lb_micro or local_sort with train.comm = collective)");
  }
  const std::string cost_kind = config.get_string("data.cost_model");
  if (cost_kind == "linear") {
    cost_model_ = data::CostModel::linear();
  } else if (cost_kind == "quadratic") {
    cost_model_ = data::CostModel::quadratic(config.get_double("data.cost_a"), config.get_double("data.cost_b"));
  } else {
    // Causal attention: each of the s(s+1)/2 query-key pairs costs 4*q_dim FLOPs forward (QK^T and
    // PV) and twice that backward, in every layer.
    cost_model_ = data::CostModel::flops(model_config_.linear_flops_per_token(),
                                         12.0 * static_cast<double>(model_config_.q_dim()) *
                                             model_config_.num_hidden_layers / 2.0);
  }
  if (world_size_ == 1) {
    store_ = std::make_unique<dist::ShardStore>(layout, model_->units(), model_config_, seed);
    comm_ = std::make_unique<dist::LocalComm>(*store_);  // nothing to communicate
  } else if (comm_name == "collective") {
    store_ = std::make_unique<dist::ShardStore>(layout, model_->units(), model_config_, seed);
    comm_ = std::make_unique<dist::CollectiveComm>(*store_, MPI_COMM_WORLD);
    pad_microbatches_ = true;
  } else {
    dist::TransportOptions options;
    options.chunk_bytes = config.get_int("comm.chunk_bytes");
    options.max_inflight = static_cast<int>(config.get_int("comm.max_inflight"));
    options.timeout_s = config.get_double("comm.timeout_s");
    options.direct_load = config.get_bool("comm.direct_load");
    for (int u = 0; u < layout.num_units(); ++u) options.slot_floats = std::max(options.slot_floats, layout.unit(u).shard);
    // The masters live in memory the transport registered, so peers can read them one-sidedly.
    transport_ = std::make_unique<dist::UcxTransport>(MPI_COMM_WORLD, layout.owned_elements(), options);
    store_ = std::make_unique<dist::ShardStore>(layout, model_->units(), model_config_, seed, transport_->exposed());
    comm_ = std::make_unique<dist::OdcComm>(*store_, *transport_, MPI_COMM_WORLD);
  }
  if (config.get_int("debug.slow_rank") == rank_) delay_s_ = config.get_double("debug.delay_ms") / 1000.0;

  optim::AdamWConfig adam;
  adam.beta1 = config.get_double("train.beta1");
  adam.beta2 = config.get_double("train.beta2");
  adam.eps = config.get_double("train.eps");
  adam.weight_decay = config.get_double("train.weight_decay");
  optimizer_ = std::make_unique<optim::ShardedAdamW>(adam);

  schedule_.lr = config.get_double("train.lr");
  schedule_.min_lr = config.get_double("train.min_lr");
  schedule_.warmup_steps = config.get_int("train.warmup_steps");
  schedule_.total_steps = config.get_int("train.steps");
  schedule_.kind = config.get_string("train.schedule");
  if (schedule_.total_steps < 1) fail("train.steps must be at least 1, found {}", schedule_.total_steps);
  if (schedule_.warmup_steps < 0) fail("train.warmup_steps must be >= 0, found {}", schedule_.warmup_steps);
  grad_clip_ = config.get_double("train.grad_clip");
  sequence_reduction_ = config.get_string("train.loss_reduction") == "sequence";

  spdlog::info("model: {} layers, hidden {}, heads {}/{} (q/kv), vocab {}, {:.2f}M parameters", model_config_.num_hidden_layers,
               model_config_.hidden_size, model_config_.num_attention_heads, model_config_.num_key_value_heads,
               model_config_.vocab_size, static_cast<double>(model_config_.num_parameters()) / 1e6);
  spdlog::info("data: {}, {} sequences per rank per step, microbatch cap {} tokens", dataset_->describe(),
               minibatch_size_, token_cap_);
  spdlog::info("comm: {} over {} rank(s); {} threads per rank", comm_->name(), world_size_, threads);
}

Trainer::~Trainer() = default;

void Trainer::build_microbatch(const std::vector<std::int64_t>& seq_indices, const std::vector<float>& weights,
                               model::PackedBatch& out) const {
  out.tokens.clear();
  out.positions.clear();
  out.cu_seqlens.clear();
  out.targets.clear();
  out.loss_weights.clear();
  for (std::size_t i = 0; i < seq_indices.size(); ++i) {
    const auto seq = dataset_->get(seq_indices[i]);
    out.append(seq.tokens.data(), seq.target_mask.data(), static_cast<std::int64_t>(seq.tokens.size()), weights[i]);
  }
}

StepResult Trainer::step() {
  const auto start = Clock::now();
  StepResult r;
  r.step = step_;
  r.lr = schedule_.at(step_);

  // The global minibatch is the same on every rank; the loss weights are normalized over all of it.
  const std::vector<std::int64_t> global = sampler_->next(minibatch_size_ * world_size_);
  double normalizer = 0.0;
  for (auto index : global) {
    const auto targets = dataset_->target_count(index);
    normalizer += sequence_reduction_ ? (targets > 0 ? 1.0 : 0.0) : static_cast<double>(targets);
  }
  if (normalizer == 0.0) spdlog::warn("step {}: the minibatch has no target tokens (all masked)", step_);

  // The planner splits the global minibatch over the ranks and packs each share into microbatches.
  // Every rank computes the same plan, so the collective baseline knows how many empty
  // microbatches to pad with, without communicating.
  data::PlanInput plan_input;
  plan_input.world_size = world_size_;
  plan_input.token_cap = token_cap_;
  plan_input.cost = cost_model_;
  plan_input.balance = balance_;
  for (auto index : global) plan_input.lengths.push_back(dataset_->length(index));
  const data::Plan global_plan = round_robin_ ? round_robin_plan(plan_input) : data::make_plan(plan_input);
  last_plan_hash_ = global_plan.hash();
  std::vector<std::vector<std::int64_t>> plan = global_plan.ranks[static_cast<std::size_t>(rank_)].microbatches;
  const auto most_microbatches = static_cast<std::size_t>(global_plan.max_microbatches());
  r.bubble_planned = pad_microbatches_ ? global_plan.bubble_collective() : global_plan.bubble_odc();
  r.planned_cost = global_plan.ranks[static_cast<std::size_t>(rank_)].cost;
  for (const auto& rank_plan : global_plan.ranks) r.planned_cost_max = std::max(r.planned_cost_max, rank_plan.cost);
  std::vector<float> weights(global.size(), 0.0f);  // per-target loss weight of each global item
  for (std::size_t i = 0; i < global.size(); ++i) {
    const auto targets = static_cast<double>(dataset_->target_count(global[i]));
    double w = 0.0;
    if (normalizer > 0 && targets > 0) w = sequence_reduction_ ? 1.0 / (targets * normalizer) : 1.0 / normalizer;
    weights[i] = static_cast<float>(w);
  }
  r.padded_microbatches = pad_microbatches_ ? static_cast<int>(most_microbatches - plan.size()) : 0;
  if (pad_microbatches_) plan.resize(most_microbatches);  // empty microbatches join the collectives

  const dist::CommWaits waits_before = comm_->waits();
  comm_->begin_minibatch();
  double local_loss = 0.0;
  double local_tokens = 0.0;
  double local_targets = 0.0;
  std::vector<std::int64_t> seqs;
  std::vector<float> seq_weights;
  for (const auto& microbatch : plan) {
    seqs.clear();
    seq_weights.clear();
    for (auto i : microbatch) {
      seqs.push_back(global[static_cast<std::size_t>(i)]);
      seq_weights.push_back(weights[static_cast<std::size_t>(i)]);
    }
    build_microbatch(seqs, seq_weights, batch_);
    if (delay_s_ > 0) std::this_thread::sleep_for(std::chrono::duration<double>(delay_s_));
    const auto out = model_->train_microbatch(batch_, *comm_, *comm_);
    local_loss += out.weighted_loss;
    local_targets += out.target_tokens;
    local_tokens += static_cast<double>(batch_.num_tokens());
  }
  comm_->end_minibatch();
  const dist::CommWaits waits_after = comm_->waits();
  r.wait_in_loop_s = waits_after.in_loop_s - waits_before.in_loop_s;
  r.wait_end_s = waits_after.minibatch_end_s - waits_before.minibatch_end_s;
  r.comm_thread_cpu_s = comm_->comm_thread_cpu_seconds();

  r.seconds = seconds_since(start);  // up to here: the minibatch's compute and communication
  std::array<double, 7> sums{store_->grad_sum_of_squares(), local_loss, local_tokens, local_targets,
                             static_cast<double>(r.padded_microbatches), r.wait_in_loop_s + r.wait_end_s, r.seconds};
  comm_->all_reduce_sum(sums);
  r.grad_norm = std::sqrt(sums[0]);
  r.loss = sums[1];
  r.tokens = sums[2];
  r.target_tokens = sums[3];
  r.padded_microbatches_global = static_cast<int>(sums[4]);
  // Measured bubble: the fraction of the ranks' minibatch time spent waiting on communication.
  r.bubble_measured = sums[6] > 0 ? sums[5] / sums[6] : 0.0;
  r.microbatches = static_cast<int>(plan.size());
  if (!std::isfinite(r.loss) || !std::isfinite(r.grad_norm)) {
    fail("step {}: loss ({}) or gradient norm ({}) is not finite; lower train.lr or check the data", step_,
         r.loss, r.grad_norm);
  }
  optimizer_->step(*store_, r.lr, optim::clip_coefficient(r.grad_norm, grad_clip_));
  ++step_;
  r.seconds = seconds_since(start);
  return r;
}

std::vector<StepResult> Trainer::run() {
  const std::int64_t steps = config_.get_int("train.steps");
  const std::int64_t log_every = std::max<std::int64_t>(1, config_.get_int("train.log_every"));
  std::vector<StepResult> results;
  const auto start = Clock::now();
  double tokens_total = 0.0;
  for (std::int64_t s = 0; s < steps; ++s) {
    const StepResult r = step();
    results.push_back(r);
    tokens_total += r.tokens;
    const double tokens_per_s = r.tokens / r.seconds;
    const double samples_per_s_per_rank = static_cast<double>(minibatch_size_) / r.seconds;
    metrics_.write({{"step", r.step + 1},
                    {"loss", r.loss},
                    {"lr", r.lr},
                    {"grad_norm", r.grad_norm},
                    {"tokens", r.tokens},
                    {"target_tokens", r.target_tokens},
                    {"tokens_per_s", tokens_per_s},
                    {"samples_per_s_per_rank", samples_per_s_per_rank},
                    {"microbatches", r.microbatches},
                    {"bubble_planned", r.bubble_planned},
                    {"planned_cost", r.planned_cost},
                    {"planned_cost_max", r.planned_cost_max},
                    {"bubble_measured", r.bubble_measured},
                    {"padded_microbatches", r.padded_microbatches},
                    {"rank", rank_},
                    {"world_size", world_size_},
                    {"param_state_bytes", store_->bytes()},
                    {"wait_in_loop_s", r.wait_in_loop_s},
                    {"wait_end_s", r.wait_end_s},
                    {"comm_thread_cpu_s", r.comm_thread_cpu_s},
                    {"peak_rss_bytes", peak_rss_bytes()},
                    {"step_time_s", r.seconds},
                    {"epoch", sampler_->epoch()}});
    if ((s + 1) % log_every == 0 || s + 1 == steps) {
      const double elapsed = seconds_since(start);
      const double eta = elapsed / static_cast<double>(s + 1) * static_cast<double>(steps - s - 1);
      spdlog::info("step {:>5}/{} | loss {:.4f} | lr {:.2e} | grad norm {:.3f} | {:.0f} tok/s | ETA {}{}", s + 1,
                   steps, r.loss, r.lr, r.grad_norm, tokens_per_s, format_duration(eta),
                   r.padded_microbatches_global > 0
                       ? fmt::format(" | {} padding microbatch(es)", r.padded_microbatches_global)
                       : std::string());
    }
  }
  const double elapsed = seconds_since(start);
  if (!results.empty()) {
    spdlog::info("done: {} steps in {}, {:.0f} tokens/s, loss {:.4f} -> {:.4f}; this rank holds {:.1f} MiB of "
                 "parameter + optimizer shards, peak RSS {:.1f} MiB", steps, format_duration(elapsed),
                 tokens_total / elapsed, results.front().loss, results.back().loss,
                 static_cast<double>(store_->bytes()) / 1048576.0, peak_rss_bytes() / 1048576.0);
  }
  return results;
}

}  // namespace odc::train
