#include "mpi_test_support.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include "odc/train/config/config_schema.h"

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
    std::uint32_t state = seed;
    for (int s = 0; s < sequences; ++s) {
      state = state * 1664525u + 1013904223u;
      const int len = 3 + static_cast<int>((state >> 9) % 13) * static_cast<int>((state >> 20) % 5);
      out << "{\"input_ids\": [";
      for (int i = 0; i < len; ++i) {
        state = state * 1664525u + 1013904223u;
        out << (i ? ", " : "") << (state >> 12) % 50;
      }
      out << "], \"loss_mask\": [";
      for (int i = 0; i < len; ++i) out << (i ? ", " : "") << (i >= len / 3 ? 1 : 0);
      out << "]}\n";
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return path;
}

Config small_config(const std::filesystem::path& data, int minibatch_size, const std::vector<std::string>& extra) {
  Config config(train::trainer_tunables());
  config.apply_assignment("data.train=" + data.string());
  config.apply_assignment("model.config={vocab_size: 50, hidden_size: 32, intermediate_size: 48, "
                          "num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2}");
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
