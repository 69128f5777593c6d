// odc_hf_train_dump --checkpoint DIR --case CASE.json --out DIR
//
// Trains a Hugging Face checkpoint for a few steps the way odc-train does on one rank, and writes
// what tests/parity/test_transformers_parity.py compares against transformers' own model and
// torch.optim.AdamW. The pieces are the trainer's, not copies of them: io::HfCheckpoint reads the
// weights into a ShardStore (world 1) shard by shard as Trainer does, LocalComm hands them to the
// model, LlamaModel::train_microbatch accumulates into the store, optim::clip_coefficient and
// optim::ShardedAdamW step it (decay segments from the unit layouts).
//   CASE.json: {"sequences": [{"input_ids": [...], "loss_mask": [...]}, ...],   mask optional
//               "microbatches": [[0, 2], [1]],      sequence indices packed into each microbatch
//               "steps": 3, "lr": 1e-2, "grad_clip": 1.0 (0 = off),
//               "adamw": {"beta1", "beta2", "eps", "weight_decay"}}
//   outputs:   loaded.safetensors  every parameter by its HF name (f32) as loaded
//              logits.safetensors  "mb0", "mb1", ...: forward logits [tokens, vocab] before training
//              grads.safetensors   step 1's gradient, summed over the microbatches, before clipping
//              final.safetensors   parameters after `steps` optimizer steps
//              summary.json        per-step loss, grad norm and clip coefficient, target count; the
//                                  tensors that do not decay; architecture and source dtype
// The sequences are one minibatch, weighted as train.loss_reduction "token" weighs it.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "odc/backend/cpu_backend.h"
#include "parity_case.h"
#include "odc/core/dtype.h"
#include "odc/core/error.h"
#include "odc/distributed/comm/local_comm.h"
#include "odc/distributed/shard/shard_layout.h"
#include "odc/distributed/shard/shard_store.h"
#include "odc/io/hf_checkpoint.h"
#include "odc/io/safetensors_writer.h"
#include "odc/model/batch.h"
#include "odc/model/llama_model.h"
#include "odc/optim/sharded_adamw.h"

namespace {

using odc::parity::Sequence;

// train.loss_reduction "token", as MinibatchSource::next weighs a minibatch: every target counts
// 1 / (targets of the whole minibatch), so the loss is the mean over its targets however the
// sequences are packed.
float token_weight(const std::vector<Sequence>& sequences, const std::string& where) {
  double targets = 0.0;
  for (const auto& s : sequences) targets += s.targets;
  if (targets == 0.0) odc::fail("{}: no loss targets", where);
  return static_cast<float>(1.0 / targets);
}

enum class Kind { weights, gradients };

void write_store(const std::string& path, odc::distributed::ShardStore& store,
                 const std::vector<odc::model::UnitLayout>& units, Kind kind,
                 const std::map<std::string, std::string>& metadata = {}) {
  std::vector<odc::io::SafetensorsEntry> entries;
  for (std::size_t u = 0; u < units.size(); ++u) {
    const int unit = static_cast<int>(u);
    const float* base = kind == Kind::weights ? store.master(unit) : store.grad(unit);
    for (const auto& t : units[u].tensors) entries.push_back({t.name, odc::DType::f32, t.shape, base + t.offset});
  }
  odc::io::write_safetensors(path, entries, metadata);
}

int run(const std::string& checkpoint_dir, const std::string& case_path, const std::string& out_dir) {
  const nlohmann::json spec = odc::parity::read_case(case_path);
  std::filesystem::create_directories(out_dir);

  const odc::io::HfCheckpoint checkpoint(checkpoint_dir);
  const odc::model::LlamaConfig& config = checkpoint.config();
  const auto sequences = odc::parity::read_sequences(spec, case_path);
  const float weight = token_weight(sequences, case_path);
  std::vector<odc::model::PackedBatch> batches;
  for (const auto& mb : spec.at("microbatches")) {
    odc::model::PackedBatch batch;
    for (const auto index : mb.get<std::vector<std::size_t>>()) {
      const Sequence& s = sequences.at(index);
      batch.append(s.input_ids.data(), s.loss_mask.data(), static_cast<std::int64_t>(s.input_ids.size()), weight);
    }
    batches.push_back(std::move(batch));
  }

  // As Trainer: the model with its backend, a store of world 1 filled from the checkpoint.
  odc::model::LlamaModel model(config, std::make_unique<odc::backend::CpuBackend>(1, odc::DType::f32));
  const auto& units = model.units();
  const odc::distributed::ShardLayout layout(units, 1, 0);
  odc::distributed::ShardStore store(layout, units, config, 0, {}, &model.backend());
  const std::span<float> masters = store.host_masters();
  for (int u = 0; u < layout.num_units(); ++u) {
    checkpoint.read_unit_range(u, layout.shard_begin(u, 0), layout.unit(u).shard, masters.data() + store.offset(u));
  }
  store.push_to_device();
  odc::distributed::LocalComm comm(store);

  nlohmann::json no_decay = nlohmann::json::array();
  for (const auto& u : units) {
    for (const auto& t : u.tensors) {
      if (!t.weight_decay) no_decay.push_back(t.name);
    }
  }
  write_store(out_dir + "/loaded.safetensors", store, units, Kind::weights);
  {
    std::vector<std::vector<float>> logits(batches.size());
    std::vector<odc::io::SafetensorsEntry> entries;
    for (std::size_t b = 0; b < batches.size(); ++b) {
      model.forward(batches[b], comm, &logits[b]);
      entries.push_back({fmt::format("mb{}", b), odc::DType::f32, {batches[b].num_tokens(), config.vocab_size},
                         logits[b].data()});
    }
    odc::io::write_safetensors(out_dir + "/logits.safetensors", entries);
  }

  const auto& aj = spec.at("adamw");
  odc::optim::AdamWConfig adam;
  adam.beta1 = aj.at("beta1").get<double>();
  adam.beta2 = aj.at("beta2").get<double>();
  adam.eps = aj.at("eps").get<double>();
  adam.weight_decay = aj.at("weight_decay").get<double>();
  odc::optim::ShardedAdamW optimizer(adam);
  const double lr = spec.at("lr").get<double>();
  const double grad_clip = spec.value("grad_clip", 0.0);
  const int steps = spec.at("steps").get<int>();
  nlohmann::json losses = nlohmann::json::array(), norms = nlohmann::json::array(), coefs = nlohmann::json::array();
  double targets = 0.0;
  for (int step = 1; step <= steps; ++step) {
    // Trainer::train_step without the ranks: zero, accumulate, norm, clip, AdamW.
    comm.begin_minibatch();
    double loss = 0.0;
    targets = 0.0;
    for (const auto& batch : batches) {
      const auto result = model.train_microbatch(batch, comm, comm);
      loss += result.weighted_loss;
      targets += result.target_tokens;
    }
    comm.end_minibatch();
    const double norm = std::sqrt(store.grad_sum_of_squares());
    if (step == 1) write_store(out_dir + "/grads.safetensors", store, units, Kind::gradients);
    const double coef = odc::optim::clip_coefficient(norm, grad_clip);
    optimizer.step(store, lr, coef);
    losses.push_back(loss);
    norms.push_back(norm);
    coefs.push_back(coef);
  }
  store.pull_to_host();
  write_store(out_dir + "/final.safetensors", store, units, Kind::weights);

  const nlohmann::json summary = {{"architecture", checkpoint.architecture()},
                                  {"dtype", std::string(odc::dtype_name(checkpoint.dtype()))},
                                  {"losses", losses},
                                  {"grad_norms", norms},
                                  {"clip_coefs", coefs},
                                  {"target_tokens", targets},
                                  {"no_weight_decay", no_decay}};
  std::ofstream(out_dir + "/summary.json") << summary.dump(2) << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  constexpr const char* kUsage = "usage: odc_hf_train_dump --checkpoint DIR --case CASE.json --out DIR\n";
  std::string checkpoint, case_path, out_dir;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    std::string* target = arg == "--checkpoint" ? &checkpoint
                          : arg == "--case"     ? &case_path
                          : arg == "--out"      ? &out_dir
                                                : nullptr;
    if (target == nullptr || i + 1 >= argc) {
      std::fprintf(stderr, "odc_hf_train_dump: unexpected argument '%s'\n%s", arg.c_str(), kUsage);
      return 2;
    }
    *target = argv[++i];
  }
  if (checkpoint.empty() || case_path.empty() || out_dir.empty()) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  try {
    return run(checkpoint, case_path, out_dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "odc_hf_train_dump: error: %s\n", e.what());
    return 1;
  }
}
