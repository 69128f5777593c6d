// model.device / model.dtype at the trainer: a device the run cannot use is a clear error naming
// the key, raised before the trainer reads data or writes anything (odc-train exits 1).
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>

#include "unit/rank_threads.h"
#include "odc/backend/backend_factory.h"
#include "odc/train/config/config_schema.h"
#include "odc/train/run/trainer.h"

using namespace odc;

namespace {

struct Run {
  std::filesystem::path dir;
  Config config;
};

Run make_run(const std::string& name, const std::vector<std::string>& extra) {
  const auto dir = std::filesystem::temp_directory_path() / ("odc_device_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  {
    std::ofstream data(dir / "data.jsonl");
    for (int s = 0; s < 8; ++s) data << "{\"input_ids\": [1, 2, 3, 4, " << 5 + s << "]}\n";
  }
  Config config(train::trainer_tunables());
  config.apply_assignment("data.train=" + (dir / "data.jsonl").string());
  config.apply_assignment("model.config={vocab_size: 32, hidden_size: 16, intermediate_size: 24, "
                          "num_hidden_layers: 1, num_attention_heads: 2, num_key_value_heads: 1}");
  config.apply_assignment("data.minibatch_size=2");
  config.apply_assignment("train.steps=1");
  config.apply_assignment("train.peak_flops=1e10");
  config.apply_assignment("train.metrics_file=" + (dir / "metrics.jsonl").string());
  config.apply_assignment("checkpoint.dir=" + (dir / "ckpt").string());
  for (const auto& e : extra) config.apply_assignment(e);
  config.validate();
  return {dir, config};
}

}  // namespace

TEST_CASE("model.device=cuda without a usable GPU is a clear error and nothing is written", "[train]") {
  Run run = make_run("nogpu", {"model.device=cuda", "model.dtype=bfloat16"});
  std::string error;
  try {
    train::Trainer trainer(run.config);
    trainer.run(false);
  } catch (const Error& e) {
    error = e.what();
  }
  if (!error.empty() || !backend::cuda_backend_built()) {
    // Without CUDA in the build, or without a device: the message names the key and says why.
    CHECK_THAT(error, Catch::Contains("model.device=cuda:"));
    CHECK_FALSE(std::filesystem::exists(run.dir / "metrics.jsonl"));
    CHECK_FALSE(std::filesystem::exists(run.dir / "ckpt"));
  }
  std::filesystem::remove_all(run.dir);
}

TEST_CASE("model.device=cuda with float32 asks for bfloat16", "[train]") {
  Run run = make_run("f32", {"model.device=cuda"});
  CHECK_THROWS_WITH(train::Trainer(run.config), Catch::Contains("model.dtype=float32 on model.device=cuda"));
  CHECK_FALSE(std::filesystem::exists(run.dir / "metrics.jsonl"));
  std::filesystem::remove_all(run.dir);
}

TEST_CASE("model.device=cuda on two ranks: trains over CUDA IPC, or names the missing device on every rank", "[train]") {
  Run run = make_run("ranks", {"model.device=cuda", "model.dtype=bfloat16"});
  const auto errors = test::on_every_rank(2, [&](distributed::HostGroup& group) {
    train::Trainer trainer(run.config, group);
    trainer.run(false);
  });
  if (!backend::cuda_backend_built() || !errors[0].empty()) {
    for (const auto& e : errors) CHECK_THAT(e, Catch::Contains("model.device=cuda:"));
    CHECK_FALSE(std::filesystem::exists(run.dir / "metrics.jsonl"));
  } else {
    // A GPU: both ranks (threads of this process, on the same device) trained the step.
    for (const auto& e : errors) CHECK(e == "");
    CHECK(std::filesystem::exists(run.dir / "metrics.jsonl"));
  }
  std::filesystem::remove_all(run.dir);
}

TEST_CASE("model.device and model.dtype accept only their choices", "[train]") {
  Config config(train::trainer_tunables());
  CHECK(config.get_string("model.device") == "cpu");
  CHECK(config.get_string("model.dtype") == "float32");
  CHECK_THROWS_WITH(config.apply_assignment("model.device=tpu"),
                    Catch::Contains("model.device") && Catch::Contains("cpu, cuda") && Catch::Contains("'tpu'"));
  CHECK_THROWS_WITH(config.apply_assignment("model.dtype=float16"),
                    Catch::Contains("model.dtype") && Catch::Contains("float32, bfloat16"));
  config.apply_assignment("model.dtype=bfloat16");
  CHECK(config.get_string("model.dtype") == "bfloat16");
}
