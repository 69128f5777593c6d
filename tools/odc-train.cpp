// odc-train CONFIG.yaml [--set key.path=value]... [--dump-config]
// Trains a LLaMA-style model; run directly, under mpirun, or under odc-run --local N.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "cli/command_line.h"
#include "cli/tool_main.h"
#include "odc/core/logging.h"
#include "odc/data/data_keys.h"
#include "odc/data/dataset.h"
#include "odc/distributed/group/local_launch.h"
#include "odc/distributed/group/mpi_host_group.h"
#include "odc/distributed/group/mpi_session.h"
#include "odc/distributed/group/shm_host_group.h"
#include "odc/distributed/group/startup_deadline.h"
#include "odc/distributed/transport/transport_keys.h"
#include "odc/model/model_keys.h"
#include "odc/train/config/batch_schedule.h"
#include "odc/train/config/checkpoint_keys.h"
#include "odc/train/plan/calibrate.h"
#include "odc/train/config/config_schema.h"
#include "odc/train/plan/memory_plan.h"
#include "odc/train/plan/plan_report.h"
#include "odc/train/config/rl_keys.h"
#include "odc/train/config/run_settings.h"
#include "odc/train/config/train_keys.h"
#include "odc/train/plan/step_estimate.h"
#include "odc/train/rl/online_rl_loop.h"
#include "odc/train/run/trainer.h"

namespace {

constexpr const char* kUsage = R"(usage: odc-train [CONFIG.yaml] [--set key.path=value]... [--dump-config] [--plan-memory [--plan-ranks N]
                 [--device-profile FILE] [--plan-device NAME]] [--calibrate-cost]

Trains (fine-tunes) a LLaMA-style decoder, from random weights or a Hugging Face checkpoint
(model.checkpoint), on token ids (JSONL or the binary format) or on chat, prompt/completion or
text records tokenized with the model's tokenizer (data.format). Run directly (one process,
without MPI: e.g. one GPU with model.device: cuda), under
  mpirun -np N odc-train CONFIG.yaml        (or odc-run -np N ..., for a graceful Ctrl-C)
or as N processes of this host without MPI, which meet in shared memory:
  odc-run --local N odc-train CONFIG.yaml
Values come from the built-in defaults, then CONFIG.yaml, then ODC_<SECTION>_<KEY> environment
variables, then --set assignments (e.g. --set train.lr=1e-3 --set model.config.num_hidden_layers=2).

  --set k=v       override one key (repeatable)
  --dump-config   print the effective configuration (YAML, with docs), then what it resolves to on
                  this many ranks (global batch, steps, warmup, the memory plan's items), and exit
  --plan-memory   print the memory plan of one rank (memory_plan.h: every item, the peak, the
                  budget and whether it fits; then one JSON line) without training, and exit
                  (1 when the plan does not fit). Plans for this many ranks on this machine's
                  memory, or --plan-ranks N and train.memory_budget_gib (e.g. a GPU node planned
                  from anywhere); the token count is data.max_tokens_per_microbatch (a number or auto)
                  Then the estimated seconds of one microbatch (forward, backward, recompute) and
                  of the optimizer step at that shape, with where its rates come from
  --plan-ranks N  the world size --plan-memory plans for (default: the ranks started)
  --device-profile FILE  the estimate's rates measured per op category, from the file that
                  gpu_model_throughput --profile writes (same device kind as model.device);
                  without it, nominal rates: this CPU's measured peak, or a GPU's datasheet
  --plan-device NAME  the GPU of the nominal rates (a100-80gb, h100-sxm, h200; default h100-sxm)
  --calibrate-cost  time forward+backward of sequences of 64..4096 tokens on this model and
                  machine and print the points and the quadratic fit (JSON), then the --set
                  lines of the measured model (data.cost_model=measured, data.cost_points: it
                  follows the timings between points) and of the quadratic fit
  -h, --help      this text

Exit status: 0 success, 1 bad input or a failure (any rank), 2 bad command line.
)";

odc::cli::Command command() {
  using odc::cli::Takes;
  return {"odc-train", kUsage,
          {{"--set", Takes::values},
           {"--dump-config", Takes::nothing},
           {"--plan-memory", Takes::nothing},
           {"--plan-ranks", Takes::value, "--plan-memory"},
           {"--device-profile", Takes::value, "--plan-memory"},
           {"--plan-device", Takes::value, "--plan-memory"},
           {"--calibrate-cost", Takes::nothing}},
          "config file", 1};
}

int run(const odc::cli::Arguments& args, const odc::distributed::MpiSession& mpi, const odc::train::StopSignals& signals) {
  // Each of these prints its own answer instead of training: given together, all but one were ignored.
  std::vector<std::string> modes;
  for (const char* mode : {"--dump-config", "--plan-memory", "--calibrate-cost"}) {
    if (args.flag(mode)) modes.emplace_back(mode);
  }
  if (modes.size() > 1) {
    throw args.usage_error(fmt::format("{} each answer instead of training: give one", fmt::join(modes, " and ")));
  }
  // The config's warnings (an ODC_* variable that names no key) are the same on every rank: only
  // rank 0 prints them (setup_logging below sets every rank's level for the run).
  const char* local_rank = std::getenv(odc::distributed::kLocalRankVariable);
  if (mpi.initialized() ? mpi.rank() != 0 : local_rank != nullptr && std::string_view(local_rank) != "0") {
    spdlog::set_level(spdlog::level::err);
  }
  // Every rank reads the same config: its errors are printed once (cli::SameOnEveryRank).
  const auto config = odc::cli::same_on_every_rank(
      [&] { return odc::train::load_trainer_config(args.positional(0), args.assignments()); });
  // Started by `odc-run --local N` (no MPI): the ranks of this host meet in shared memory.
  std::unique_ptr<odc::distributed::ShmHostGroup> local;
  if (!mpi.initialized() && odc::distributed::launched_locally()) {
    local = odc::distributed::make_local_group_from_env(odc::keys::comm_timeout_s.read(config));
  }
  const int rank = local ? local->rank() : mpi.rank();
  const int world_size = local ? local->size() : mpi.world_size();
  if (args.flag("--dump-config")) {
    if (rank == 0) {
      std::fputs(config.dump().c_str(), stdout);
      // What the keys that can be given two ways resolve to on this many ranks (the global batch).
      std::fputs(odc::train::resolved_summary(config, world_size).c_str(), stdout);
      std::fputs(odc::train::memory_plan_comment(config, world_size, mpi.initialized(),
                                                 local ? local->size() : mpi.initialized() ? mpi.world_size() : 1)
                     .c_str(),
                 stdout);
      // With a checkpoint, its config.json defines the model (checked against model.config here):
      // show that shape, not model.config's defaults.
      if (!odc::keys::model_checkpoint.read(config).empty()) {
        const auto model = odc::train::training_model_config(config);
        std::printf("# the model, from model.checkpoint's config.json (model.config is not used):\n# %s\n",
                    model.to_json().dump().c_str());
      }
    }
    return 0;
  }
  if (args.flag("--plan-memory")) {
    const int ranks = args.integer("--plan-ranks", world_size, odc::Range::at_least(1));
    // Started alone, it plans for --plan-ranks ranks of this host.
    const int on_host = local ? local->size() : mpi.initialized() ? mpi.world_size() : ranks;
    const odc::train::EstimateOptions estimate{args.value_or("--device-profile", ""), args.value_or("--plan-device", "")};
    const bool fits = odc::train::print_memory_plan(config, ranks, mpi.initialized(), on_host, estimate);
    return fits ? 0 : 1;
  }
  if (args.flag("--calibrate-cost")) {
    if (rank == 0) {
      std::vector<odc::train::CalibrationPoint> points;
      const auto cost = odc::train::calibrate_cost_model(config, &points);
      nlohmann::json out = {{"calibration", "quadratic"}, {"cost_a", cost.a}, {"cost_b", cost.b}};
      std::string cost_points;
      for (const auto& p : points) {
        out["points"].push_back({{"length", p.length}, {"seconds", p.seconds}});
        cost_points += fmt::format("{}{}:{:.6g}", cost_points.empty() ? "" : ",", p.length, p.seconds);
      }
      out["cost_points"] = cost_points;
      std::printf("%s\n--set data.cost_model=measured --set data.cost_points=%s\n"
                  "--set data.cost_model=quadratic --set data.cost_a=%.6g --set data.cost_b=%.6g\n",
                  out.dump().c_str(), cost_points.c_str(), cost.a, cost.b);
    }
    return 0;
  }
  // The online RL loop samples its own rollouts from rl.prompts: it reads no data.train.
  const bool online_rl = !odc::keys::rl_prompts.read(config).empty();
  odc::cli::same_on_every_rank([&] {
    config.validate(online_rl ? std::vector<std::string>{"data.train"} : std::vector<std::string>{});
    odc::train::resolve_run_settings(config, false);  // the settings' own checks (train.trace_file's name)
    odc::train::global_batch_size(config, world_size);  // its overflow (minibatch x ranks) too
    // The data file every rank reads: one that cannot be opened is said once, not once per rank.
    if (!online_rl) odc::data::check_dataset_opens(odc::keys::data_train.read(config), odc::keys::data_format.read(config));
  });
  odc::setup_logging(rank, world_size, odc::keys::train_log_level.read(config));
  // The loop: data.train's minibatches, or (rl.prompts) the online RL loop's rollouts, sampled with
  // the trainer's current weights every iteration.
  const odc::train::StepSourceFactory loop = online_rl ? odc::train::OnlineRlLoop::factory() : nullptr;
  if (local) {
    odc::train::Trainer trainer(config, *local, loop);
    trainer.run(/*keep_results=*/false, &signals);
    return 0;
  }
  if (!mpi.initialized()) {
    // Started directly: one process, no MPI (a single-GPU machine need not have MPI's runtime).
    odc::train::Trainer trainer(config, loop);
    trainer.run(/*keep_results=*/false, &signals);
    return 0;
  }
  if (mpi.rank() == 0 && std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr && std::getenv("ODC_LAUNCHER") == nullptr &&
      !odc::keys::checkpoint_dir.read(config).empty()) {
    // mpirun kills the ranks about a second after Ctrl-C or SIGTERM: a checkpoint may not fit.
    spdlog::info("started by mpirun directly: a Ctrl-C or SIGTERM to mpirun ends the ranks ~1 s later, "
                 "checkpoint or not; launch with odc-run (same arguments) for a graceful stop");
  }
  const auto group = odc::distributed::make_world_group(odc::keys::comm_timeout_s.read(config));
  odc::train::Trainer trainer(config, *group, loop);
  trainer.run(/*keep_results=*/false, &signals);  // constant memory over any number of steps
  return 0;
}

// The start-up deadline of this run (comm.timeout_s, at least distributed::kMinStartupTimeoutS),
// read before MPI starts, quietly: the real reading comes later and reports any error. An
// unreadable command line or config gets the deadline of the defaults.
double startup_timeout_s(int argc, char** argv) {
  const auto level = spdlog::get_level();
  spdlog::set_level(spdlog::level::off);
  double timeout = 0.0;
  try {
    const auto args = odc::cli::parse(command(), argc, argv);
    timeout = odc::keys::comm_timeout_s.read(odc::train::load_trainer_config(args.positional(0), args.assignments()));
  } catch (...) {
    try {
      timeout = odc::keys::comm_timeout_s.read(odc::train::load_trainer_config("", {}));
    } catch (...) {
      timeout = 600.0;  // comm.timeout_s's default, should the environment itself be unreadable
    }
  }
  spdlog::set_level(level);
  return odc::distributed::startup_timeout(timeout);
}

}  // namespace

int main(int argc, char** argv) {
  // First, before MPI starts a thread: every thread inherits the blocked stop signals.
  const odc::train::StopSignals signals;
  return odc::cli::run_mpi_tool("odc-train", argc, argv, [&](const odc::distributed::MpiSession& mpi) {
    return run(odc::cli::parse(command(), argc, argv), mpi, signals);
  }, /*mpi_optional=*/true, startup_timeout_s(argc, argv));
}
