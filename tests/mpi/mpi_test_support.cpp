#include "mpi_test_support.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include "odc/train/config/config_schema.h"
#include "unit/synthetic_data.h"

namespace odc::test {

int mpi_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int mpi_world() {
  int w = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &w);
  return w;
}

std::unique_ptr<distributed::MpiHostGroup> world_group() { return distributed::make_world_group(600.0); }

std::filesystem::path ragged_dataset(const std::string& name, int sequences, std::uint32_t seed) {
  const auto dir = std::filesystem::temp_directory_path() / "odc_mpi_tests";
  const auto path = dir / (name + ".jsonl");
  if (mpi_rank() == 0) {
    std::filesystem::create_directories(dir);
    std::ofstream out(path);
    const auto length = [](int, Lcg& rng) {
      const std::uint32_t state = rng.next();
      return 3 + static_cast<int>((state >> 9) % 13) * static_cast<int>((state >> 20) % 5);
    };
    out << synthetic_jsonl({sequences, seed, length, /*vocab=*/50, /*shift=*/12, /*prompt_divisor=*/3});
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return path;
}

Config small_config(const std::filesystem::path& data, int minibatch_size, const std::vector<std::string>& extra) {
  Config config(train::trainer_tunables());
  config.apply_assignment("data.train=" + data.string());
  config.apply_assignment(tiny_trainer_model());
  config.apply_assignment("data.minibatch_size=" + std::to_string(minibatch_size));
  config.apply_assignment("train.steps=20");
  config.apply_assignment("train.warmup_steps=2");
  config.apply_assignment("train.lr=0.001");
  config.apply_assignment("train.log_level=warn");
  config.apply_assignment("train.peak_flops=1e10");  // skip the start-up sgemm in tests
  for (const auto& e : extra) config.apply_assignment(e);
  config.validate();
  return config;
}

std::vector<std::vector<float>> gather_weights(distributed::ShardStore& store) {
  const auto& layout = store.layout();
  std::vector<std::vector<float>> units;
  for (int u = 0; u < layout.num_units(); ++u) {
    const auto& shard = layout.unit(u);
    std::vector<float> full(static_cast<std::size_t>(shard.padded));
    MPI_Gather(store.master(u), static_cast<int>(shard.shard), MPI_FLOAT, full.data(), static_cast<int>(shard.shard),
               MPI_FLOAT, 0, MPI_COMM_WORLD);
    full.resize(static_cast<std::size_t>(shard.numel));
    units.push_back(std::move(full));
  }
  return units;
}

double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

}  // namespace odc::test
