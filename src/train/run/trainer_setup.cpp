// The Trainer's construction: one builder per concern, called in order by the constructor.
#include <cstdlib>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "odc/core/error.h"
#include "odc/core/hash.h"
#include "odc/core/process_stats.h"
#include "odc/distributed/group/in_process_group.h"
#include "odc/io/checkpoint_format.h"
#include "odc/io/native_checkpoint.h"
#include "odc/train/config/batch_schedule.h"
#include "odc/train/config/config_schema.h"
#include "odc/train/config/run_settings.h"
#include "odc/train/plan/memory_plan.h"
#include "odc/train/run/output_probe.h"
#include "odc/train/run/trainer.h"

namespace odc::train {

namespace {

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

// The layout of train.sharding over the group's hosts (or debug.ranks_per_host's blocks).
distributed::ShardingPlan sharding_plan(const RunSettings& settings, distributed::HostGroup& group) {
  const auto kind = settings.train.sharding;
  const auto block = settings.debug.ranks_per_host;
  distributed::Placement placement{1, group.size(), 0, group.rank()};
  if (block > 0) {
    placement = distributed::block_placement(group.rank(), group.size(), static_cast<int>(block), "debug.ranks_per_host");
  } else if (kind != distributed::Sharding::full) {
    placement = group.placement();
  } else {
    // Full sharding only describes the hosts: uneven ones are fine for it.
    try {
      placement = group.placement();
    } catch (const Error&) {
    }
  }
  return distributed::plan_sharding(kind, group.rank(), group.size(), placement);
}

// The model this run trains. A resumed run's checkpoint holds the model config and every weight,
// so the base weights of model.checkpoint are never read then, and a model.checkpoint that was
// moved away is not needed: its config.json is compared when it is there, else the checkpoint's
// model config is taken.
model::LlamaConfig run_model_config(const Config& config, const RunSettings& settings, const std::string& resume_path) {
  const std::string& base = settings.model.checkpoint;
  if (resume_path.empty() || base.empty() || std::filesystem::exists(std::filesystem::path(base) / "config.json")) {
    return training_model_config(config);
  }
  const TrainingManifest manifest = TrainingManifest::from_json(io::read_manifest(resume_path), resume_path);
  if (manifest.model_config.is_null()) fail("checkpoint '{}': the manifest holds no model_config", resume_path);
  spdlog::info("model.checkpoint '{}' is not there (moved?): not needed, {} holds the model config and every weight",
               base, resume_path);
  return model::LlamaConfig::from_json(manifest.model_config, resume_path + "/manifest.json", false);
}

// Text data is tokenized with model.checkpoint's tokenizer.json unless data.tokenizer names one:
// that file is the one thing of the base checkpoint a resumed run still needs.
void check_tokenizer_present(const RunSettings& settings) {
  const std::string& format = settings.data.format;
  const std::string& base = settings.model.checkpoint;
  if ((format != "chat" && format != "text") || !settings.data.tokenizer.empty() || base.empty()) return;
  const auto tokenizer = std::filesystem::path(base) / "tokenizer.json";
  if (!std::filesystem::exists(tokenizer)) {
    fail("data.format {} tokenizes with model.checkpoint's tokenizer, but '{}' does not exist (was model.checkpoint "
         "moved?): set data.tokenizer to the tokenizer.json (a native checkpoint holds the model and its weights, "
         "not the tokenizer)", format, tokenizer.string());
  }
}

// This rank among the ranks of its host, as the launcher says (Open MPI, odc-run --local, Slurm);
// else its rank (ranks that are threads of one process).
int local_rank(int rank) {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "ODC_LOCAL_RANK", "SLURM_LOCALID"}) {
    if (const char* value = std::getenv(name); value != nullptr && *value != '\0') return std::atoi(value);
  }
  return rank;
}

}  // namespace

Trainer::Trainer(const Config& config, distributed::HostGroup& group, StepSourceFactory source)
    : Trainer(config, nullptr, &group, std::move(source)) {}

Trainer::Trainer(const Config& config, StepSourceFactory source)
    : Trainer(config, std::move(distributed::InProcessGroup::create(1).front()), nullptr, std::move(source)) {}

Trainer::Trainer(const Config& config, std::unique_ptr<distributed::HostGroup> own_group, distributed::HostGroup* group,
                 StepSourceFactory source)
    : config_(config), own_group_(std::move(own_group)), group_(group != nullptr ? *group : *own_group_) {
  group_.announce("starting up (data, model, checkpoint)");
  settings_ = resolve_run_settings(config);  // every key this run reads, once (train.threads checked here)
  make_backend();                            // first: a device that cannot be used fails before anything is read
  check_export_target(config);               // before anything is read, written or trained
  probe_outputs();
  const std::string resume = open_checkpoints();
  model_config_ = run_model_config(config, settings_, resume);
  check_tokenizer_present(settings_);
  sharding_ = sharding_plan(settings_, group_);
  if (source) step_source_ = source(settings_, model_config_, group_.rank(), group_.size());
  if (settings_.rl.online() && !step_source_) {
    fail("rl.prompts is set: the online RL loop drives this run; construct the Trainer with its step source "
         "(OnlineRlLoop::factory(), as odc-train does)");
  }
  make_data();
  make_model();
  check_ranks_agree();
  // Weights that a checkpoint (the resume point, else model.checkpoint) will fill are not drawn
  // from the random initialization first.
  make_comm(!resume.empty() || !settings_.model.checkpoint.empty());
  make_context_exchange();
  make_optimizer();
  const InitialState initial = initial_state(resume);
  make_report(initial);
  log_start();
}

// The backend first: a device that cannot be used (no CUDA build or GPU, several ranks) fails
// before anything is read or written. The trainer owns it and lends it to the model, the comm
// (the state's memory), the optimizer (through the store) and the evaluator.
void Trainer::make_backend() { backend_ = training_backend(settings_, local_rank(group_.rank())); }

void Trainer::probe_outputs() const {
  const RunSettings& settings = settings_;
  // Outputs written only at the end of the run (by rank 0) are proven writable before anything
  // is read or trained.
  if (group_.is_root()) {
    if (const auto trace = rank_output_path(settings.train.trace_file, 0); !trace.empty()) {
      probe_output_file(trace, "train.trace_file");
    }
    if (const auto& hf = settings.checkpoint.export_hf; !hf.empty()) {
      probe_output_directory(hf, "checkpoint.export_hf");
    }
  }
}

std::string Trainer::open_checkpoints() {
  const RunSettings& settings = settings_;
  // The checkpoint directory is locked and the run's identity and resume point settled before
  // anything is read: a second job on the directory, or another run's checkpoints there, stop
  // every rank here.
  if (const auto& from = settings.checkpoint.resume; from != "auto" && from != "never") {
    io::refuse_hf_where_native_expected(from, "checkpoint.resume");  // an HF directory: say how to use it
  }
  checkpointer_ = std::make_unique<Checkpointer>(settings, config_, group_);
  return checkpointer_->begin_run().resume_path;
}

// The memory plan (memory_plan.h): data.max_tokens_per_microbatch: auto resolves from it, and a
// run it does not fit is refused here, before anything is trained.
void Trainer::make_data() {
  const RunSettings& settings = settings_;
  const int rank = group_.rank();
  const int world = group_.size();
  RunMemory memory = plan_run_memory(settings, model_config_, sharding_.shard_world,
                                     backend_->memory_capacity(group_.ranks_on_host()),
                                     group_.ranks_on_host(), group_.over_mpi(),
                                     step_source_ ? step_source_->max_sequence_length() : 0,
                                     distributed::shard_group_hosts(sharding_.kind, distributed::comm_hosts(group_)));
  const std::int64_t online_length = step_source_ ? step_source_->max_sequence_length() : 0;
  data_ = std::make_unique<MinibatchSource>(settings, config_, model_config_, rank, world, settings.comm.kind,
                                            memory.auto_token_cap, online_length);
  if (data_->may_split()) {
    // Split sequences add their key segments and the exchange's region, sized by the longest
    // split: an automatic cap is planned again with them, and the data source follows the cap.
    memory.inputs.context_rows = data_->max_split_rows();
    if (memory.auto_token_cap > 0 && memory.budget > 0) {
      MemoryInputs inputs = memory.inputs;
      const std::int64_t cap = max_tokens_that_fit(inputs, memory.budget);
      if (cap > 0 && cap < memory.auto_token_cap) {
        memory.auto_token_cap = cap;
        data_ = std::make_unique<MinibatchSource>(settings, config_, model_config_, rank, world, settings.comm.kind,
                                                  memory.auto_token_cap, online_length);
        memory.inputs.context_rows = data_->max_split_rows();
      }
    }
  }
  if (Evaluator::configured(settings)) {
    evaluator_ = std::make_unique<Evaluator>(settings, model_config_, rank, world, data_->token_cap());
  }
  memory_plan_ = settle_memory_plan(memory, data_->token_cap(), group_.is_root());  // or refuse the run
}

void Trainer::make_model() {
  const RunSettings& settings = settings_;
  // The measured side: what the resident set grows by from here (the model, its state and buffers,
  // the activations), against the plan at the end of the run.
  baseline_rss_ = read_process_stats().rss_bytes;
  model_ = std::make_unique<model::LlamaModel>(model_config_, *backend_);
  const auto& mc = model_config_;  // model.attention: settled (an impossible cudnn fails) before anything is trained
  spdlog::info("attention: {}",
               backend_->select_attention(mc.num_attention_heads, mc.num_key_value_heads, mc.head_dim));
  model_->set_recompute(memory_plan_.inputs.recompute);  // train.recompute, as planned
  if (settings.objective.grpo) model_->set_policy_objective(settings.objective.policy, settings.objective.entropy);
}

void Trainer::check_ranks_agree() {
  const int rank = group_.rank();
  const int world = group_.size();
  // Only a checkpoint (or another rank) can need the fingerprint: it reads the whole dataset.
  if (step_source_) {
    data_fingerprint_ = step_source_->fingerprint();
  } else if (world > 1 || checkpointer_->in_use()) {
    data_fingerprint_ = data_->fingerprint();
  }
  if (world > 1) {
    // Every rank must train the same thing: compare fingerprints before any collective that
    // would otherwise hang or silently mix different inputs.
    distributed::check_identical_across_ranks(group_, {{"the configuration", fnv1a64(config_.canonical())},
                                                       {"the model config", fnv1a64(model_config_.to_json().dump())},
                                                       {(step_source_ ? "the prompts " : "the dataset ") + data_description(), data_fingerprint_}});
  }
  if (world > 1) check_world_size(model_->units(), sharding_.shard_world);
  if (sharding_.kind == distributed::Sharding::hybrid) {
    // The collectives run inside a host: lb_micro equalizes, and padding evens, only a host's counts.
    std::vector<double> hosts(static_cast<std::size_t>(world), 0.0);
    hosts[static_cast<std::size_t>(rank)] = sharding_.placement.host;
    group_.all_reduce_sum(hosts, "the hosts of the ranks");
    std::vector<int> host_of_rank;
    for (double h : hosts) host_of_rank.push_back(static_cast<int>(h));
    data_->set_collective_groups(std::move(host_of_rank));
  }
}

void Trainer::make_comm(bool loads_weights) {
  const RunSettings& settings = settings_;
  const int rank = group_.rank();
  comm_ = distributed::make_sharded_comm(settings.comm, sharding_, group_, model_->units(), model_config_,
                                         loads_weights ? std::nullopt : std::optional(settings.model.seed),
                                         backend_.get());
  // Compute copies of the weights made once per step where the comm hands out the masters (and the
  // memory plan has room for them).
  backend_->keep_weight_copies(comm_->comm().hands_out_masters() && memory_plan_.inputs.keep_weight_copies);
  // Where several hosts hold the same shards (hybrid), the first host's ranks write them.
  checkpointer_->set_shards(sharding_.shard_rank, sharding_.shard_world, sharding_.replica == 0);
  if (settings.debug.slow_rank == rank) delay_s_ = settings.debug.delay_ms / 1000.0;
}

// Context parallelism: where a microbatch may be split over several ranks (a sequence over the cap,
// or the collective's static degree), every rank builds the exchange its groups' members meet
// through (collective: every rank decides alike, from the same data), sized for the largest split.
void Trainer::make_context_exchange() {
  if (!data_->may_split()) return;
  context_exchange_ = distributed::make_context_exchange(
      group_, backend_.get(),
      context_exchange_options(model_config_, backend_->activation_dtype(), data_->max_split_rows(),
                               settings_.comm.transport.timeout_s));
  timed_exchange_ = std::make_unique<TimedContextExchange>(*context_exchange_);
  model_->set_context_exchange(timed_exchange_.get());
  if (group_.is_root()) {
    spdlog::info("context parallelism: sequences over the microbatch cap of {} tokens are split over several ranks "
                 "({}; exchanges over {})", data_->token_cap(),
                 data_->context_degree() > 1 ? fmt::format("static groups of {} ranks", data_->context_degree())
                                             : std::string("groups chosen per minibatch"),
                 context_exchange_->name());
  }
}

void Trainer::make_optimizer() {
  const RunSettings& settings = settings_;
  optim::AdamWConfig adam;
  adam.beta1 = settings.train.beta1;
  adam.beta2 = settings.train.beta2;
  adam.eps = settings.train.eps;
  adam.weight_decay = settings.train.weight_decay;
  optimizer_ = std::make_unique<optim::ShardedAdamW>(adam);
  if (step_source_) {
    length_.steps = step_source_->steps(data_->global_batch_size(), data_->global_batch_origin());
  } else {
    length_ = run_length(config_, data_->dataset().size(), data_->global_batch_size());
  }
  schedule_ = lr_schedule(config_, length_.steps);

}

// The initial weights, whatever their source: the checkpoint resumed, model.checkpoint's Hugging
// Face weights, or the store's random initialization.
InitialState Trainer::initial_state(const std::string& resume) {
  const RunSettings& settings = settings_;
  InitialState initial = checkpointer_->initial_state(
      store(), settings.model.checkpoint,
      {model_config_, data_fingerprint_, data_description(), data_->global_batch_size()});
  source_ = initial.source;
  if (step_source_) step_source_->start(*this, initial, resume);  // e.g. mid-iteration rollouts, the RL reference
  if (const auto& manifest = initial.resumed) {
    if (manifest->sampler && data_->has_data()) data_->sampler().restore(*manifest->sampler);
    optimizer_->set_steps_taken(manifest->optimizer_steps);
    step_ = manifest->step;
    first_step_ = step_;
    resumed_from_ = resume;
    spdlog::info("{}", initial.resumed_note);  // every check of the checkpoint passed
  }
  checkpointer_->retire_abandoned();  // a rollback's abandoned branch, once the resume succeeded
  return initial;
}

void Trainer::make_report(const InitialState& initial) {
  const RunSettings& settings = settings_;
  const int rank = group_.rank();
  const int world = group_.size();
  if (!settings.train.trace_file.empty()) tracer_ = std::make_unique<Tracer>(rank);
  // The MFU denominator: train.peak_flops, else the device's measured peak (and then also the
  // GEMM rate for the GEMM fraction; with train.peak_flops nothing is measured).
  device_ = backend_->describe();
  peak_flops_ = settings.train.peak_flops;
  backend::PeakFlops& measured = measured_;
  if (peak_flops_ == 0) {
    measured = backend_->measure_peak_flops();
    // One denominator on every rank: the best any rank found (ranks measure at once, and one that
    // lost time to a busy core would otherwise divide by less than its peers).
    if (world > 1) {
      std::vector<double> peaks(static_cast<std::size_t>(world), 0.0);
      peaks[static_cast<std::size_t>(rank)] = measured.device;
      group_.all_reduce_sum(peaks, "the peak FLOP/s agreement");
      const double own = measured.device;
      for (const double p : peaks) measured.device = std::max(measured.device, p);
      if (measured.device > own) measured.source += fmt::format("; {:.1f} GFLOP/s on another rank", measured.device / 1e9);
    }
    peak_flops_ = measured.device;
    gemm_flops_ = measured.gemm;
  }
  report_ = std::make_unique<RunReport>(
      settings.train, group_, peak_flops_, gemm_flops_, resumed_from_.empty() ? 0 : step_,
      initial.resumed && initial.resumed->unwritten_metrics.contains(rank) ? initial.resumed->unwritten_metrics.at(rank)
                                                                           : std::vector<std::string>{});
  // Every rank's clocks (traces) start together.
  if (world > 1) group_.barrier("the start-up barrier");
  if (tracer_) tracer_->set_origin(Tracer::Clock::now());

}

void Trainer::log_start() const {
  const int world = group_.size();
  const RunSettings& settings = settings_;
  spdlog::info("model: {} layers, hidden {}, heads {}/{} (q/kv), vocab {}, {:.2f}M parameters{}",
               model_config_.num_hidden_layers, model_config_.hidden_size, model_config_.num_attention_heads,
               model_config_.num_key_value_heads, model_config_.vocab_size,
               static_cast<double>(model_config_.num_parameters()) / 1e6,
               model_->recompute() == model::Recompute::none
                   ? std::string()
                   : fmt::format("; activation recomputation {} (train.recompute)", model::recompute_name(model_->recompute())));
  const std::int64_t global = data_->global_batch_size();
  spdlog::info("data: {}, global batch {} sequences per step ({}), microbatch cap {} tokens",
               data_description(), global, data_->global_batch_origin(), data_->token_cap());
  if (length_.epochs > 0) {
    spdlog::info("train.epochs {}: {} steps per epoch{}, {} steps", length_.epochs, length_.steps_per_epoch,
                 length_.last_step_sequences < global
                     ? fmt::format(" (the last trains the remaining {} sequence{})", length_.last_step_sequences,
                                   length_.last_step_sequences == 1 ? "" : "s")
                     : std::string(),
                 length_.steps);
  }
  const auto steps_text = [](std::int64_t n) { return fmt::format("{} step{}", n, n == 1 ? "" : "s"); };
  spdlog::info("lr: {} schedule, peak {:.3g}, warmup: {}{}", schedule_.kind, schedule_.lr,
               steps_text(schedule_.warmup_steps),
               schedule_.kind == "wsd" ? ", decay: the last " + steps_text(schedule_.decay_steps) : std::string());
  if (schedule_.warmup_steps >= length_.steps && length_.steps > 0 && group_.is_root()) {  // the same on every rank
    spdlog::warn("the warmup ({}) is as long as the run ({}): the learning rate never reaches train.lr = {:.3g}; set "
                 "train.warmup_steps or train.warmup_ratio",
                 steps_text(schedule_.warmup_steps), steps_text(length_.steps), schedule_.lr);
  }
  spdlog::info("{}; {}", device_.text,
               measured_.device > 0
                   ? fmt::format("peak {:.1f} GFLOP/s ({}), GEMM {:.1f} GFLOP/s ({:.0f}% of peak)",
                                 measured_.device / 1e9, measured_.source, measured_.gemm / 1e9,
                                 100.0 * measured_.gemm / measured_.device)
                   : fmt::format("peak {:.1f} GFLOP/s (train.peak_flops; nothing measured)", peak_flops_ / 1e9));
  if (!device_.warning.empty()) spdlog::warn("{}", device_.warning);
  spdlog::info("comm: {} over {} rank{}; {} compute thread{} per rank; MFU against {:.1f} GFLOP/s per rank{}",
               comm_->comm().name(), world, world == 1 ? "" : "s", settings.train.threads,
               settings.train.threads == 1 ? "" : "s", peak_flops_ / 1e9,
               measured_.device > 0 ? " (device peak)" : " (train.peak_flops)");
  if (world > 1) spdlog::info("sharding: {}", sharding_.describe());
}

void Trainer::train_on(std::unique_ptr<data::TokenDataset> dataset) {
  data_->set_rollouts(std::move(dataset), settings_.data.seed);
}

void Trainer::record_rollouts(const nlohmann::json& stats) {
  record_metrics([&] { report_->record_rollouts(stats); });
}

std::string Trainer::data_description() const {
  return step_source_ ? step_source_->describe() : data_->dataset().describe();
}

}  // namespace odc::train
