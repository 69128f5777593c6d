#include "odc/train/trainer.h"

#include <chrono>
#include <cstring>
#include <cmath>
#include <limits>
#include <thread>

#include <spdlog/spdlog.h>

#include "odc/core/error.h"
#include "odc/core/hash.h"
#include "odc/core/process_stats.h"
#include "odc/data/text_dataset.h"
#include "odc/distributed/bootstrap.h"
#include "odc/distributed/collective_comm.h"
#include "odc/distributed/local_comm.h"
#include "odc/distributed/odc_comm.h"
#include "odc/io/hf_checkpoint.h"
#include "odc/io/native_checkpoint.h"
#include "odc/kernels/matmul.h"
#include "odc/train/config_schema.h"
#include "odc/train/stop_signals.h"

namespace odc::train {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double peak_rss_bytes() { return static_cast<double>(read_process_stats().peak_rss_bytes); }

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
      model_config_(training_model_config(config)),
      metrics_(metrics_path(config.get_string("train.metrics_file"), rank)) {
  const auto threads = config.get_int("train.threads");
  if (threads < 1) fail("train.threads must be at least 1, found {}", threads);
  kernels::cpu::set_num_threads(static_cast<int>(threads));
  if (world_size_ > 1) {
    const double timeout_s = config.get_double("comm.timeout_s");
    if (!(timeout_s > 0)) fail("comm.timeout_s must be positive, found {}", timeout_s);
    watchdog_ = std::make_unique<distributed::Watchdog>(MPI_COMM_WORLD, timeout_s);
    watchdog_->set_activity("starting up (data, model, checkpoint)");
  }

  dataset_ = data::open_dataset(
      config.get_string("data.train"), config.get_string("data.format"), model_config_.vocab_size,
      data::TextDataOptions{data::resolve_tokenizer_path(config.get_string("data.tokenizer"),
                                                         config.get_string("model.checkpoint")),
                            config.get_string("data.chat_template")});
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
  checkpoint_dir_ = config.get_string("checkpoint.dir");
  checkpoint_every_ = config.get_int("checkpoint.every");
  if (checkpoint_every_ < 0) fail("checkpoint.every must be >= 0, found {}", checkpoint_every_);
  if (config.get_int("checkpoint.keep") < 0) fail("checkpoint.keep must be >= 0, found {}", config.get_int("checkpoint.keep"));
  // Only a checkpoint can need the fingerprint (auto without a directory has nothing to resume).
  const std::string resume_setting = config.get_string("checkpoint.resume");
  const bool resuming_possible = resume_setting != "never" && (resume_setting != "auto" || !checkpoint_dir_.empty());
  if (world_size_ > 1 || !checkpoint_dir_.empty() || resuming_possible) data_fingerprint_ = dataset_fingerprint(*dataset_);
  if (world_size_ > 1) {
    // Every rank must train the same thing: compare fingerprints before any collective that
    // would otherwise hang or silently mix different inputs.
    distributed::check_identical_across_ranks({{"the configuration", fnv1a64(config.canonical())},
                                        {"the model config", fnv1a64(model_config_.to_json().dump())},
                                        {"the dataset " + dataset_->describe(), data_fingerprint_}});
    check_world_size(model_->units(), world_size_);
  }
  distributed::ShardLayout layout(model_->units(), world_size_, rank_);
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
    cost_model_ = data::CostModel::flops(model_config_.linear_flops_per_token(),
                                         model_config_.attention_flops_per_pair());
  }
  if (world_size_ == 1) {
    store_ = std::make_unique<distributed::ShardStore>(layout, model_->units(), model_config_, seed);
    comm_ = std::make_unique<distributed::LocalComm>(*store_);  // nothing to communicate
  } else if (comm_name == "collective") {
    store_ = std::make_unique<distributed::ShardStore>(layout, model_->units(), model_config_, seed);
    comm_ = std::make_unique<distributed::CollectiveComm>(*store_, MPI_COMM_WORLD);
    pad_microbatches_ = true;
  } else {
    distributed::TransportOptions options;
    options.chunk_bytes = config.get_int("comm.chunk_bytes");
    options.max_inflight = static_cast<int>(config.get_int("comm.max_inflight"));
    options.timeout_s = config.get_double("comm.timeout_s");
    options.direct_load = config.get_bool("comm.direct_load");
    for (int u = 0; u < layout.num_units(); ++u) options.slot_floats = std::max(options.slot_floats, layout.unit(u).shard);
    // The masters live in memory the transport registered, so peers can read them one-sidedly.
    transport_ = std::make_unique<distributed::UcxTransport>(MPI_COMM_WORLD, layout.owned_elements(), options);
    store_ = std::make_unique<distributed::ShardStore>(layout, model_->units(), model_config_, seed, transport_->exposed());
    comm_ = std::make_unique<distributed::OdcComm>(*store_, *transport_, MPI_COMM_WORLD);
  }
  comm_->set_watchdog(watchdog_.get());
  if (const std::string source = config.get_string("model.checkpoint"); !source.empty()) {
    // Every rank reads only its shard of every unit from the safetensors files.
    const io::HfCheckpoint checkpoint(source);
    source_architecture_ = checkpoint.architecture();
    source_dtype_ = checkpoint.dtype();
    for (int u = 0; u < layout.num_units(); ++u) {
      checkpoint.read_unit_range(u, layout.shard_begin(u, rank_), layout.unit(u).shard, store_->master(u));
    }
    spdlog::info("model: loaded {} ({}, {}) from {}", checkpoint.architecture(), dtype_name(checkpoint.dtype()),
                 fmt::format("{:.2f}M parameters", static_cast<double>(model_config_.num_parameters()) / 1e6), source);
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
  if (schedule_.total_steps < 0) fail("train.steps must be >= 0 (0 = load, export and stop), found {}", schedule_.total_steps);
  if (schedule_.warmup_steps < 0) fail("train.warmup_steps must be >= 0, found {}", schedule_.warmup_steps);
  grad_clip_ = config.get_double("train.grad_clip");
  sequence_reduction_ = config.get_string("train.loss_reduction") == "sequence";

  // Resume: an explicit checkpoint, or the newest complete one in checkpoint.dir (auto).
  const std::string resume = config.get_string("checkpoint.resume");
  std::string resume_path;
  if (resume == "auto") {
    if (!checkpoint_dir_.empty()) resume_path = io::latest_checkpoint(checkpoint_dir_).value_or("");
  } else if (resume != "never") {
    resume_path = resume;
  }
  if (world_size_ > 1) {
    // Ranks must continue from the same checkpoint (a shared directory seen at different moments
    // could differ): compare before reading.
    const distributed::Watchdog::Wait wait(watchdog_.get(), "the start-up check that every rank resumes from the same checkpoint");
    distributed::check_identical_across_ranks({{"the checkpoint to resume from ('" + resume_path + "')", fnv1a64(resume_path)}});
  }
  if (!resume_path.empty()) load_checkpoint(resume_path);

  if (!config.get_string("train.trace_file").empty()) {
    tracer_ = std::make_unique<Tracer>(rank_);
    trace_steps_ = config.get_int("train.trace_steps");
    if (trace_steps_ < 0) fail("train.trace_steps must be >= 0, found {}", trace_steps_);
  }
  peak_flops_ = config.get_double("train.peak_flops");
  if (peak_flops_ < 0) fail("train.peak_flops must be >= 0, found {}", peak_flops_);
  if (peak_flops_ == 0) peak_flops_ = measure_cpu_peak_flops();
  if (world_size_ > 1) {
    // Every rank's clocks (traces) start together.
    const distributed::Watchdog::Wait wait(watchdog_.get(), "the start-up barrier");
    MPI_Barrier(MPI_COMM_WORLD);
  }
  if (tracer_) tracer_->set_origin(Tracer::Clock::now());

  spdlog::info("model: {} layers, hidden {}, heads {}/{} (q/kv), vocab {}, {:.2f}M parameters", model_config_.num_hidden_layers,
               model_config_.hidden_size, model_config_.num_attention_heads, model_config_.num_key_value_heads,
               model_config_.vocab_size, static_cast<double>(model_config_.num_parameters()) / 1e6);
  spdlog::info("data: {}, {} sequences per rank per step, microbatch cap {} tokens", dataset_->describe(),
               minibatch_size_, token_cap_);
  spdlog::info("comm: {} over {} rank(s); {} threads per rank; MFU against {:.1f} GFLOP/s per rank{}", comm_->name(),
               world_size_, threads, peak_flops_ / 1e9,
               config.get_double("train.peak_flops") > 0 ? " (train.peak_flops)" : " (measured sgemm)");
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
  r.planned_makespan = pad_microbatches_ ? global_plan.makespan_collective() : global_plan.makespan_odc();
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

  // Tracing covers the first train.trace_steps steps (all when 0).
  Tracer* tracer = tracer_ && (trace_steps_ == 0 || step_ < trace_steps_) ? tracer_.get() : nullptr;
  model_->set_tracer(tracer);
  comm_->set_tracer(tracer);
  if (tracer != nullptr) tracer->set_step(step_);

  const distributed::CommWaits waits_before = comm_->waits();
  const auto minibatch_start = Clock::now();
  announce(fmt::format("step {}: minibatch start", step_ + 1));
  {
    const TraceScope trace(tracer, "barrier", "minibatch start");
    comm_->begin_minibatch();
  }
  double local_loss = 0.0;
  double local_tokens = 0.0;
  double local_targets = 0.0;
  std::vector<std::int64_t> seqs;
  std::vector<float> seq_weights;
  for (std::size_t m = 0; m < plan.size(); ++m) {
    seqs.clear();
    seq_weights.clear();
    for (auto i : plan[m]) {
      seqs.push_back(global[static_cast<std::size_t>(i)]);
      seq_weights.push_back(weights[static_cast<std::size_t>(i)]);
    }
    build_microbatch(seqs, seq_weights, batch_);
    const double tokens = static_cast<double>(batch_.num_tokens());
    const double pairs = batch_.causal_pairs();
    if (tracer != nullptr) tracer->set_microbatch(static_cast<std::int64_t>(m));
    announce(fmt::format("step {}: microbatch {}/{}", step_ + 1, m + 1, plan.size()));
    const TraceScope trace(tracer, "microbatch", fmt::format("microbatch {}", m), {{"tokens", tokens}, {"pairs", pairs}});
    if (delay_s_ > 0) std::this_thread::sleep_for(std::chrono::duration<double>(delay_s_));
    const auto out = model_->train_microbatch(batch_, *comm_, *comm_);
    local_loss += out.weighted_loss;
    local_targets += out.target_tokens;
    local_tokens += tokens;
    r.flops += model_config_.training_flops(tokens, pairs);
  }
  if (tracer != nullptr) tracer->set_microbatch(-1);
  std::array<double, 8> sums{};
  {
    const TraceScope trace(tracer, "barrier", "minibatch end");
    announce(fmt::format("step {}: minibatch end", step_ + 1));
    comm_->end_minibatch();
    const distributed::CommWaits waits_after = comm_->waits();
    r.wait_gather_s = waits_after.gather_s - waits_before.gather_s;
    r.wait_push_s = waits_after.push_s - waits_before.push_s;
    r.wait_barrier_s = waits_after.barrier_s - waits_before.barrier_s;
    r.wait_in_loop_s = r.wait_gather_s + r.wait_push_s;
    r.wait_end_s = r.wait_barrier_s;
    r.comm_thread_cpu_s = comm_->comm_thread_cpu_seconds();
    r.minibatch_s = seconds_since(minibatch_start);  // the minibatch's compute and communication
    r.compute_s = std::max(0.0, r.minibatch_s - r.wait_in_loop_s - r.wait_end_s);
    sums = {store_->grad_sum_of_squares(), local_loss, local_tokens, local_targets,
            static_cast<double>(r.padded_microbatches), r.wait_in_loop_s + r.wait_end_s, r.minibatch_s, r.flops};
    comm_->all_reduce_sum(sums);
  }
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
  const auto optimizer_start = Clock::now();
  announce(fmt::format("step {}: optimizer", step_ + 1));
  {
    const TraceScope trace(tracer, "optimizer", "optimizer step");
    optimizer_->step(*store_, r.lr, optim::clip_coefficient(r.grad_norm, grad_clip_));
  }
  r.optimizer_s = seconds_since(optimizer_start);
  ++step_;
  r.seconds = seconds_since(start);
  r.mfu = peak_flops_ > 0 ? sums[7] / (static_cast<double>(world_size_) * r.seconds * peak_flops_) : 0.0;
  totals_.compute_s += r.compute_s;
  totals_.gather_s += r.wait_gather_s;
  totals_.push_s += r.wait_push_s;
  totals_.barrier_s += r.wait_barrier_s;
  totals_.optimizer_s += r.optimizer_s;
  totals_.microbatches += r.microbatches;
  totals_.tokens += local_tokens;
  totals_.flops += r.flops;
  return r;
}

void Trainer::RunTotals::add(const StepResult& r) {
  if (steps == 0) first_loss = r.loss;
  last_loss = r.loss;
  bubble_planned_sum += r.bubble_planned;
  ++steps;
}

std::vector<StepResult> Trainer::run(bool keep_results) {
  const std::int64_t steps = config_.get_int("train.steps");
  const std::int64_t stop_at = config_.get_int("train.stop_at_step");
  if (stop_at < 0) fail("train.stop_at_step must be >= 0, found {}", stop_at);
  const std::int64_t last = stop_at > 0 ? std::min(stop_at, steps) : steps;
  const std::int64_t log_every = std::max<std::int64_t>(1, config_.get_int("train.log_every"));
  std::vector<StepResult> results;
  RunTotals totals;
  const auto start = Clock::now();
  const std::int64_t first = step_;
  if (first >= last) spdlog::info("nothing to do: {} steps done, this run ends at step {}", first, last);
  const StopSignals signals;
  bool preempted = false;
  for (std::int64_t s = first; s < last; ++s) {
    const StepResult r = step();
    totals.add(r);
    if (keep_results) results.push_back(r);
    const double tokens_per_s = r.tokens / r.seconds;
    const double samples_per_s_per_rank = static_cast<double>(minibatch_size_) / r.seconds;
    const ProcessStats process = read_process_stats();
    metrics_.write({{"step", r.step + 1},
                    {"loss", r.loss},
                    {"lr", r.lr},
                    {"grad_norm", r.grad_norm},
                    {"tokens", r.tokens},
                    {"target_tokens", r.target_tokens},
                    {"tokens_per_s", tokens_per_s},
                    {"samples_per_s_per_rank", samples_per_s_per_rank},
                    {"mfu", r.mfu},
                    {"flops", r.flops},
                    {"microbatches", r.microbatches},
                    {"bubble_planned", r.bubble_planned},
                    {"planned_cost", r.planned_cost},
                    {"planned_cost_max", r.planned_cost_max},
                    {"planned_makespan", r.planned_makespan},
                    {"bubble_measured", r.bubble_measured},
                    {"padded_microbatches", r.padded_microbatches},
                    {"rank", rank_},
                    {"world_size", world_size_},
                    {"param_state_bytes", store_->bytes()},
                    {"compute_s", r.compute_s},
                    {"wait_gather_s", r.wait_gather_s},
                    {"wait_push_s", r.wait_push_s},
                    {"wait_barrier_s", r.wait_barrier_s},
                    {"wait_in_loop_s", r.wait_in_loop_s},
                    {"wait_end_s", r.wait_end_s},
                    {"optimizer_s", r.optimizer_s},
                    {"comm_thread_cpu_s", r.comm_thread_cpu_s},
                    {"peak_rss_bytes", process.peak_rss_bytes},
                    {"rss_bytes", process.rss_bytes},
                    {"pinned_bytes", process.pinned_bytes},
                    {"open_fds", process.open_fds},
                    {"threads", process.threads},
                    {"registered_bytes", transport_ ? transport_->registered_bytes() : 0},
                    {"ucx_endpoints", transport_ ? transport_->endpoints_created() : 0},
                    {"minibatch_time_s", r.minibatch_s},
                    {"step_time_s", r.seconds},
                    {"epoch", sampler_->epoch()}});
    // A stop signal on any rank: every rank learns it at the same step (one small all-reduce),
    // finishes here, checkpoints below and returns normally (exit 0).
    std::array<double, 1> stop{signals.requested() ? 1.0 : 0.0};
    announce(fmt::format("step {}: stop-signal check", step_));
    comm_->all_reduce_sum(stop);
    if (stop[0] > 0 && step_ < last) {
      spdlog::warn("stop requested ({} on {} rank(s)) after step {}: {}", signals.requested() ? strsignal(signals.signal_number()) : "a signal",
                   stop[0], step_,
                   checkpoint_dir_.empty() ? "no checkpoint.dir is set, so nothing is saved"
                                           : "saving a checkpoint and exiting; resume with checkpoint.resume: auto");
      preempted = true;
    }
    if (!preempted && !checkpoint_dir_.empty() && checkpoint_every_ > 0 && step_ % checkpoint_every_ == 0 && step_ < last) {
      save_checkpoint();
    }
    if ((s + 1) % log_every == 0 || s + 1 == last) {
      const double elapsed = seconds_since(start);
      const double eta = elapsed / static_cast<double>(s + 1 - first) * static_cast<double>(last - s - 1);
      spdlog::info("step {:>5}/{} | loss {:.4f} | lr {:.2e} | grad norm {:.3f} | {:.0f} tok/s | MFU {:.1f}% | "
                   "bubble {:.1f}% (planned {:.1f}%) | ETA {}{}",
                   s + 1, steps, r.loss, r.lr, r.grad_norm, tokens_per_s, 100.0 * r.mfu, 100.0 * r.bubble_measured,
                   100.0 * r.bubble_planned, format_duration(eta),
                   r.padded_microbatches_global > 0
                       ? fmt::format(" | {} padding microbatch(es)", r.padded_microbatches_global)
                       : std::string());
    }
    if (preempted) break;
  }
  if (!checkpoint_dir_.empty() && first < last) save_checkpoint();
  announce("finishing (export, summary, trace)");
  // A preempted run exports nothing: it is not finished (the checkpoint resumes it).
  if (!preempted && !config_.get_string("checkpoint.export_hf").empty()) export_hf(config_.get_string("checkpoint.export_hf"));
  log_summary(totals, seconds_since(start));
  write_trace();
  return results;
}

void Trainer::export_hf(const std::string& dir) {
  const auto start = Clock::now();
  const std::string wanted = config_.get_string("checkpoint.export_dtype");
  DType dtype = DType::f32;
  if (wanted == "auto") {
    if (source_dtype_) dtype = *source_dtype_;
  } else {
    dtype = wanted == "bfloat16" ? DType::bf16 : wanted == "float16" ? DType::f16 : DType::f32;
  }
  const std::string architecture =
      !source_architecture_.empty() ? source_architecture_
                                    : (model_config_.attention_bias ? "Qwen2ForCausalLM" : "LlamaForCausalLM");
  // Settings that cannot be exported fail here on every rank, before any rank waits in a gather.
  // (A failure while rank 0 writes ends odc-train with MPI_Abort, which stops the other ranks.)
  io::check_hf_architecture(architecture, model_config_, "checkpoint.export_hf");
  const auto& layout = store_->layout();
  // Rank 0 writes; every rank contributes its shard of one unit at a time (in unit order).
  auto gather = [&](int unit, float* full) {
    const std::int64_t shard = layout.unit(unit).shard;
    if (world_size_ == 1) {
      std::copy(store_->master(unit), store_->master(unit) + shard, full);
      return;
    }
    const distributed::Watchdog::Wait wait(watchdog_.get(), "the export's gather of unit weights");
    MPI_Gather(store_->master(unit), static_cast<int>(shard), MPI_FLOAT, full, static_cast<int>(shard), MPI_FLOAT, 0,
               MPI_COMM_WORLD);
  };
  if (rank_ == 0) {
    std::vector<float> padded;
    io::write_hf_checkpoint(dir, model_config_, architecture, dtype, [&](int unit, float* out) {
      padded.resize(static_cast<std::size_t>(layout.unit(unit).padded));
      gather(unit, padded.data());
      std::copy(padded.begin(), padded.begin() + layout.unit(unit).numel, out);
    }, 5'000'000'000, config_.get_string("model.checkpoint"));
    spdlog::info("export: {} ({}) written to {} in {:.2f} s", architecture, dtype_name(dtype), dir, seconds_since(start));
  } else {
    for (int u = 0; u < layout.num_units(); ++u) gather(u, nullptr);
  }
  barrier();
}

void Trainer::announce(std::string activity) {
  if (watchdog_) watchdog_->set_activity(std::move(activity));
}

void Trainer::barrier() {
  std::array<double, 1> token{0.0};
  comm_->all_reduce_sum(token);
}

void Trainer::save_checkpoint() {
  const auto start = Clock::now();
  const std::int64_t owned = store_->layout().owned_elements();
  const std::string staging = io::staging_path(checkpoint_dir_, step_);
  announce(fmt::format("step {}: checkpoint write", step_));
  io::write_rank_shards(staging, rank_,
                        {{store_->master_base(), static_cast<std::size_t>(owned)},
                         {store_->exp_avg(0), static_cast<std::size_t>(owned)},
                         {store_->exp_avg_sq(0), static_cast<std::size_t>(owned)}});
  const double delay_ms = config_.get_double("debug.checkpoint_delay_ms");
  const auto delay_rank = config_.get_int("debug.checkpoint_delay_rank");
  if (delay_ms > 0 && (delay_rank < 0 || delay_rank == rank_)) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(delay_ms));
  announce(fmt::format("step {}: checkpoint: every rank's shards written?", step_));
  barrier();  // every rank's shards are on disk
  if (rank_ == 0) {
    announce(fmt::format("step {}: checkpoint commit", step_));
    const auto sampler = sampler_->state();
    const nlohmann::json manifest = {
        {"comm", std::string(comm_->name())},
        {"optimizer_steps", optimizer_->steps_taken()},
        {"sampler", {{"seed", sampler.seed}, {"epoch", sampler.epoch}, {"position", sampler.position},
                     {"dataset_size", sampler.dataset_size}, {"shuffle", sampler.shuffle}}},
        {"data_fingerprint", fmt::format("{:016x}", data_fingerprint_)},
        {"dataset", dataset_->describe()},
        {"model_config", model_config_.to_json()},
        {"config", config_.dump()}};
    const std::string path =
        io::commit_checkpoint(checkpoint_dir_, step_, world_size_, manifest, static_cast<int>(config_.get_int("checkpoint.keep")));
    spdlog::info("checkpoint: step {} saved to {} in {:.2f} s", step_, path, seconds_since(start));
  }
  announce(fmt::format("step {}: checkpoint committed?", step_));
  barrier();  // nobody moves on (or exits) before the commit
}

void Trainer::load_checkpoint(const std::string& path) {
  const nlohmann::json manifest = io::read_manifest(path);
  const int saved_world = manifest["world_size"].get<int>();
  if (saved_world != world_size_) {
    fail("checkpoint '{}' was written by {} ranks, this run has {}: native checkpoints hold per-rank shards; "
         "export it to a Hugging Face directory and start from model.checkpoint to change the world size",
         path, saved_world, world_size_);
  }
  if (manifest.value("model_config", nlohmann::json()) != model_config_.to_json()) {
    fail("checkpoint '{}' holds a different model (model_config: {}) than this run's ({})", path,
         manifest.value("model_config", nlohmann::json()).dump(), model_config_.to_json().dump());
  }
  // A checkpoint imported from a Hugging Face directory (odc-ckpt import) has weights only: the
  // data starts from the beginning.
  const bool imported = manifest.contains("imported_from");
  if (!imported && manifest.value("data_fingerprint", std::string()) != fmt::format("{:016x}", data_fingerprint_)) {
    fail("checkpoint '{}' was trained on different data ({}) than {}: resuming would not continue the same "
         "run (use checkpoint.resume: never to start over)", path, manifest.value("dataset", std::string("?")),
         dataset_->describe());
  }
  const std::int64_t owned = store_->layout().owned_elements();
  io::read_rank_shards(path, manifest, rank_,
                       {{store_->master_base(), static_cast<std::size_t>(owned)},
                        {store_->exp_avg(0), static_cast<std::size_t>(owned)},
                        {store_->exp_avg_sq(0), static_cast<std::size_t>(owned)}});
  if (!imported) {
    const auto& s = manifest.at("sampler");
    data::SamplerState state;
    state.seed = s.at("seed").get<std::uint64_t>();
    state.epoch = s.at("epoch").get<std::int64_t>();
    state.position = s.at("position").get<std::int64_t>();
    state.dataset_size = s.at("dataset_size").get<std::int64_t>();
    state.shuffle = s.at("shuffle").get<bool>();
    sampler_->restore(state);
  }
  optimizer_->set_steps_taken(manifest.at("optimizer_steps").get<std::int64_t>());
  step_ = manifest.at("step").get<std::int64_t>();
  resumed_from_ = path;
  spdlog::info("resumed from {} (step {}, written with comm {})", path, step_, manifest.value("comm", std::string("?")));
}

// Every rank contributes its totals (an all-reduce of a vector where each rank fills its own
// slots: no extra communication primitive needed), rank 0 prints the table.
void Trainer::log_summary(const RunTotals& run, double elapsed) const {
  if (run.steps == 0) return;
  constexpr std::size_t kFields = 8;
  std::vector<double> all(static_cast<std::size_t>(world_size_) * kFields, 0.0);
  const std::size_t at = static_cast<std::size_t>(rank_) * kFields;
  all[at + 0] = totals_.compute_s;
  all[at + 1] = totals_.gather_s;
  all[at + 2] = totals_.push_s;
  all[at + 3] = totals_.barrier_s;
  all[at + 4] = totals_.optimizer_s;
  all[at + 5] = totals_.microbatches;
  all[at + 6] = totals_.tokens;
  all[at + 7] = totals_.flops;
  comm_->all_reduce_sum(all);
  if (rank_ != 0) return;
  std::vector<RankTotals> ranks(static_cast<std::size_t>(world_size_));
  double flops = 0.0, tokens = 0.0, waits = 0.0, minibatch = 0.0;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const double* v = all.data() + r * kFields;
    ranks[r] = RankTotals{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]};
    flops += v[7];
    tokens += v[6];
    waits += v[1] + v[2] + v[3];
    minibatch += v[0] + v[1] + v[2] + v[3];
  }
  const double planned = run.bubble_planned_sum / static_cast<double>(run.steps);
  const double steps = static_cast<double>(run.steps);
  spdlog::info("done: {} steps in {}, {:.0f} tokens/s, {:.3f} samples/s per rank, MFU {:.1f}% (of {:.1f} GFLOP/s "
               "per rank), bubble {:.1f}% measured / {:.1f}% planned, loss {:.4f} -> {:.4f}; this rank holds {:.1f} MiB "
               "of parameter + optimizer shards, peak RSS {:.1f} MiB\n{}",
               run.steps, format_duration(elapsed), tokens / elapsed,
               steps * static_cast<double>(minibatch_size_) / elapsed,
               100.0 * flops / (static_cast<double>(world_size_) * elapsed * peak_flops_), peak_flops_ / 1e9,
               minibatch > 0 ? 100.0 * waits / minibatch : 0.0, 100.0 * planned, run.first_loss,
               run.last_loss, static_cast<double>(store_->bytes()) / 1048576.0, peak_rss_bytes() / 1048576.0,
               format_rank_table(ranks));
}

// Rank 0 gathers every rank's events and writes one file with a track per rank.
void Trainer::write_trace() const {
  if (!tracer_) return;
  const std::string path = config_.get_string("train.trace_file");
  nlohmann::json other = {{"world_size", world_size_},
                          {"comm", std::string(comm_->name())},
                          {"balance", round_robin_ ? std::string("round_robin") : data::balance_name(balance_)},
                          {"threads", config_.get_int("train.threads")},
                          {"minibatch_size", minibatch_size_},
                          {"token_cap", token_cap_},
                          {"cost_model", {{"kind", cost_model_.kind}, {"a", cost_model_.a}, {"b", cost_model_.b}}},
                          {"peak_flops", peak_flops_},
                          {"param_bytes", 4},
                          {"model", model_config_.to_json()}};
  if (world_size_ == 1) {
    write_chrome_trace(path, tracer_->events(), other);
    spdlog::info("trace: {} events written to {}", tracer_->size(), path);
    return;
  }
  const std::string mine = tracer_->events().dump();
  const int length = static_cast<int>(mine.size());
  std::vector<int> lengths(static_cast<std::size_t>(world_size_), 0);
  const distributed::Watchdog::Wait wait(watchdog_.get(), "the trace gather");
  MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::vector<int> displs(lengths.size(), 0);
  std::int64_t total = 0;
  for (std::size_t r = 0; r < lengths.size(); ++r) {
    displs[r] = static_cast<int>(total);
    total += lengths[r];
  }
  if (rank_ == 0 && total > std::numeric_limits<int>::max()) {
    fail("train.trace_file: the trace is {} bytes, too large to gather; lower train.trace_steps", total);
  }
  std::string joined(rank_ == 0 ? static_cast<std::size_t>(total) : 0, '\0');
  MPI_Gatherv(mine.data(), length, MPI_CHAR, joined.data(), lengths.data(), displs.data(), MPI_CHAR, 0, MPI_COMM_WORLD);
  if (rank_ != 0) return;
  nlohmann::json events = nlohmann::json::array();
  for (std::size_t r = 0; r < lengths.size(); ++r) {
    for (auto& event : nlohmann::json::parse(joined.substr(static_cast<std::size_t>(displs[r]), static_cast<std::size_t>(lengths[r])))) {
      events.push_back(std::move(event));
    }
  }
  write_chrome_trace(path, events, other);
  spdlog::info("trace: {} events from {} ranks written to {} (open in https://ui.perfetto.dev)", events.size(),
               world_size_, path);
}

}  // namespace odc::train
