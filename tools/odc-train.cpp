// odc-train CONFIG.yaml [--set key.path=value]... [--dump-config]
// Trains a LLaMA-style model; run directly or under mpirun.
#include <cstdio>
#include <exception>

#include <nlohmann/json.hpp>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "odc/core/config.h"
#include "odc/core/error.h"
#include "odc/core/logging.h"
#include "odc/distributed/mpi_host_group.h"
#include "odc/distributed/mpi_session.h"
#include "odc/train/calibrate.h"
#include "odc/train/config_schema.h"
#include "odc/train/trainer.h"

namespace {

constexpr const char* kUsage = R"(usage: odc-train [CONFIG.yaml] [--set key.path=value]... [--dump-config] [--calibrate-cost]

Trains a LLaMA-style decoder on pre-tokenized data. Run directly (one rank) or under
  mpirun -np N odc-train CONFIG.yaml
Values come from the built-in defaults, then CONFIG.yaml, then ODC_<SECTION>_<KEY> environment
variables, then --set assignments (e.g. --set train.lr=1e-3 --set model.config.num_hidden_layers=2).

  --set k=v       override one key (repeatable)
  --dump-config   print the effective configuration (YAML, with docs) and exit
  --calibrate-cost  time forward+backward of sequences of 64..4096 tokens on this model and
                  machine, fit the quadratic cost model and print it (JSON) with the --set
                  lines to use it (data.cost_model=quadratic, data.cost_a, data.cost_b)
  --help          this text
)";

int run(int argc, char** argv, const odc::distributed::MpiSession& mpi) {
  const auto command_line = odc::parse_command_line(argc, argv);
  if (command_line.help) {
    if (mpi.rank() == 0) std::fputs(kUsage, stdout);
    return 0;
  }
  const auto config = odc::train::load_trainer_config(command_line);
  if (command_line.dump_config) {
    if (mpi.rank() == 0) std::fputs(config.dump().c_str(), stdout);
    return 0;
  }
  if (command_line.calibrate_cost) {
    if (mpi.rank() == 0) {
      std::vector<odc::train::CalibrationPoint> points;
      const auto cost = odc::train::calibrate_cost_model(config, &points);
      nlohmann::json out = {{"calibration", "quadratic"}, {"cost_a", cost.a}, {"cost_b", cost.b}};
      for (const auto& p : points) out["points"].push_back({{"length", p.length}, {"seconds", p.seconds}});
      std::printf("%s\n--set data.cost_model=quadratic --set data.cost_a=%.6g --set data.cost_b=%.6g\n",
                  out.dump().c_str(), cost.a, cost.b);
    }
    return 0;
  }
  config.validate();
  odc::setup_logging(mpi.rank(), mpi.world_size(), config.get_string("train.log_level"));
  const auto group = odc::distributed::make_world_group(config.get_double("comm.timeout_s"));
  odc::train::Trainer trainer(config, *group);
  trainer.run(/*keep_results=*/false);  // constant memory over any number of steps
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::unique_ptr<odc::distributed::MpiSession> mpi;
  try {
    mpi = std::make_unique<odc::distributed::MpiSession>(&argc, &argv);
    return run(argc, argv, *mpi);
  } catch (const odc::Error& e) {
    std::fprintf(stderr, "odc-train: error: %s\n", e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "odc-train: unexpected error: %s\n", e.what());
  }
  std::fflush(stderr);
  if (mpi && mpi->world_size() > 1) mpi->abort(1);
  return 1;
}
