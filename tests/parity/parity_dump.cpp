// odc_parity_dump --case CASE.json --out DIR
//
// Runs our model on a small parity case and writes what the PyTorch reference
// (tests/parity/llama_ref.py) recomputes in float64 (or, for a case with "dtype": "bfloat16",
// which runs CpuBackend's bf16 mode, in torch's bfloat16; test_model_parity_bf16.py):
//   init.safetensors    every parameter by its Hugging Face name (f32) as initialized
//   logits.safetensors  "mb0", "mb1", ...: forward logits [tokens, vocab] of each microbatch
//   grads.safetensors   step 1's gradient (summed over the microbatches, before clipping)
//   final.safetensors   parameters after `steps` AdamW steps
//   losses.json         per-step loss, global grad norm and clip coefficient
// The optimizer loop mirrors what the trainer does per minibatch (zero, accumulate over
// microbatches, global norm, clip, AdamW per tensor) but over resident per-unit buffers, so a parity
// failure points at the model or the kernels, not at sharding or communication.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "odc/backend/cpu_backend.h"
#include "parity_case.h"
#include "odc/core/dtype.h"
#include "odc/core/error.h"
#include "odc/io/safetensors_writer.h"
#include "odc/kernels/adamw.h"
#include "odc/model/batch.h"
#include "odc/model/llama_config.h"
#include "odc/model/llama_model.h"
#include "support/resident_weights.h"
#include "odc/model/units.h"

namespace {

using odc::parity::Sequence;

using odc::bench::ResidentWeights;
using odc::model::UnitLayout;

using UnitBuffers = std::vector<std::vector<float>>;

struct AdamWConfig {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
};

UnitBuffers zeros_like(const std::vector<UnitLayout>& units) {
  UnitBuffers out;
  for (const auto& u : units) out.emplace_back(static_cast<std::size_t>(u.numel), 0.0f);
  return out;
}

enum class Buffers { weights, gradients };

void write_units(const std::string& path, const std::vector<UnitLayout>& units, const ResidentWeights& resident,
                 Buffers which, const std::map<std::string, std::string>& metadata) {
  std::vector<odc::io::SafetensorsEntry> entries;
  for (std::size_t u = 0; u < units.size(); ++u) {
    const int unit = static_cast<int>(u);
    const float* data = which == Buffers::weights ? resident.weights(unit).data() : resident.gradients(unit).data();
    for (const auto& t : units[u].tensors) entries.push_back({t.name, odc::DType::f32, t.shape, data + t.offset});
  }
  odc::io::write_safetensors(path, entries, metadata);
}

// Deterministic, non-trivial values for the tensors the model initializes to ones or zeros (norm
// weights, biases): a norm weight of exactly 1 or a bias of exactly 0 would hide a missing
// multiply or add in the forward pass.
void jitter_constant_tensors(const std::vector<UnitLayout>& units, ResidentWeights& resident, double amplitude) {
  if (amplitude == 0.0) return;
  for (std::size_t u = 0; u < units.size(); ++u) {
    const std::span<float> weights = resident.weights(static_cast<int>(u));
    for (const auto& t : units[u].tensors) {
      if (t.init == odc::model::InitKind::normal) continue;
      for (std::int64_t i = 0; i < t.numel; ++i) {
        weights[static_cast<std::size_t>(t.offset + i)] +=
            static_cast<float>(amplitude * std::sin(0.7 * static_cast<double>(i) + 0.3 * static_cast<double>(u)));
      }
    }
  }
}

int run(const std::string& case_path, const std::string& out_dir) {
  const nlohmann::json spec = odc::parity::read_case(case_path);
  std::filesystem::create_directories(out_dir);

  const auto config = odc::model::LlamaConfig::from_json(spec.at("config"), case_path + ": config", true);
  const auto seed = spec.at("seed").get<std::uint64_t>();
  const int steps = spec.at("steps").get<int>();
  const double grad_clip = spec.value("grad_clip", 0.0);
  const double init_jitter = spec.value("init_jitter", 0.0);
  const odc::DType compute = odc::parse_dtype(spec.value("dtype", std::string("float32")));
  AdamWConfig adamw;
  const auto& aj = spec.at("adamw");
  adamw.lr = aj.at("lr").get<double>();
  adamw.beta1 = aj.at("beta1").get<double>();
  adamw.beta2 = aj.at("beta2").get<double>();
  adamw.eps = aj.at("eps").get<double>();
  adamw.weight_decay = aj.at("weight_decay").get<double>();
  if (spec.value("loss_weight", std::string("token")) != "token") {
    odc::fail("case '{}': only loss_weight \"token\" is supported", case_path);
  }

  const std::vector<Sequence> sequences = odc::parity::read_sequences(spec, case_path);
  const auto microbatch_indices = spec.at("microbatches").get<std::vector<std::vector<std::size_t>>>();

  // "token" weighting: every target of the minibatch has weight 1 / (targets in the minibatch),
  // so the loss is the mean next-token cross-entropy however the sequences are packed.
  double total_targets = 0.0;
  for (const auto& mb : microbatch_indices) {
    for (std::size_t s : mb) {
      const auto& mask = sequences.at(s).loss_mask;
      for (std::size_t i = 1; i < mask.size(); ++i) total_targets += mask[i] != 0 ? 1.0 : 0.0;
    }
  }
  if (total_targets == 0.0) odc::fail("case '{}': no loss targets", case_path);
  const auto weight = static_cast<float>(1.0 / total_targets);
  std::vector<odc::model::PackedBatch> batches;
  for (const auto& mb : microbatch_indices) {
    odc::model::PackedBatch batch;
    for (std::size_t s : mb) {
      const auto& seq = sequences.at(s);
      batch.append(seq.input_ids.data(), seq.loss_mask.data(),
                   static_cast<std::int64_t>(seq.input_ids.size()), weight);
    }
    batches.push_back(std::move(batch));
  }

  odc::model::LlamaModel model(config, std::make_unique<odc::backend::CpuBackend>(1, compute));
  const auto& units = model.units();
  ResidentWeights resident(units, config, seed);
  jitter_constant_tensors(units, resident, init_jitter);
  // The reference derives its decay groups from its own rule; the C++ flags travel along so that
  // the test can check the two agree.
  std::string no_decay;
  for (const auto& u : units) {
    for (const auto& t : u.tensors) {
      if (!t.weight_decay) no_decay += (no_decay.empty() ? "" : ",") + t.name;
    }
  }
  write_units(out_dir + "/init.safetensors", units, resident, Buffers::weights, {{"no_weight_decay", no_decay}});

  {
    std::vector<std::vector<float>> logits(batches.size());
    std::vector<odc::io::SafetensorsEntry> entries;
    for (std::size_t b = 0; b < batches.size(); ++b) {
      model.forward(batches[b], resident, &logits[b]);
      entries.push_back({fmt::format("mb{}", b), odc::DType::f32,
                         {batches[b].num_tokens(), config.vocab_size}, logits[b].data()});
    }
    odc::io::write_safetensors(out_dir + "/logits.safetensors", entries);
  }

  UnitBuffers exp_avg = zeros_like(units);
  UnitBuffers exp_avg_sq = zeros_like(units);
  nlohmann::json losses = nlohmann::json::array();
  nlohmann::json grad_norms = nlohmann::json::array();
  nlohmann::json clip_coefs = nlohmann::json::array();
  for (int step = 1; step <= steps; ++step) {
    resident.zero_gradients();
    double loss = 0.0;
    for (const auto& batch : batches) loss += model.train_microbatch(batch, resident, resident).weighted_loss;
    if (step == 1) write_units(out_dir + "/grads.safetensors", units, resident, Buffers::gradients, {});

    double sum_sq = 0.0;
    for (int u = 0; u < resident.num_units(); ++u) {
      const std::span<const float> g = resident.gradients(u);
      sum_sq += odc::kernels::cpu::sum_of_squares(g.data(), static_cast<std::int64_t>(g.size()));
    }
    const double norm = std::sqrt(sum_sq);
    // torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) when that is below 1.
    const double coef = grad_clip > 0.0 ? std::min(1.0, grad_clip / (norm + 1e-6)) : 1.0;

    for (std::size_t u = 0; u < units.size(); ++u) {
      for (const auto& t : units[u].tensors) {
        odc::kernels::cpu::AdamWParams p;
        p.lr = adamw.lr;
        p.beta1 = adamw.beta1;
        p.beta2 = adamw.beta2;
        p.eps = adamw.eps;
        p.weight_decay = t.weight_decay ? adamw.weight_decay : 0.0;
        p.step = step;
        p.grad_scale = coef;
        const auto at = static_cast<std::size_t>(t.offset);
        const int unit = static_cast<int>(u);
        odc::kernels::cpu::adamw_step(resident.weights(unit).data() + at, resident.gradients(unit).data() + at,
                                      exp_avg[u].data() + at, exp_avg_sq[u].data() + at, t.numel, p);
      }
    }
    losses.push_back(loss);
    grad_norms.push_back(norm);
    clip_coefs.push_back(coef);
  }
  // Every unit's gradient must have been handed off once per microbatch.
  for (int u = 0; u < resident.num_units(); ++u) {
    const std::int64_t expected = static_cast<std::int64_t>(steps) * static_cast<std::int64_t>(batches.size());
    if (resident.pushes(u) != expected) {
      odc::fail("unit {} pushed its gradient {} times, expected {} (steps x microbatches)", u, resident.pushes(u),
                expected);
    }
  }
  write_units(out_dir + "/final.safetensors", units, resident, Buffers::weights, {});

  nlohmann::json summary = {{"losses", losses},
                            {"grad_norms", grad_norms},
                            {"clip_coefs", clip_coefs},
                            {"total_targets", total_targets},
                            {"num_parameters", config.num_parameters()}};
  std::ofstream(out_dir + "/losses.json") << summary.dump(2) << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string case_path;
  std::string out_dir;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--case" || arg == "--out") && i + 1 < argc) {
      (arg == "--case" ? case_path : out_dir) = argv[++i];
    } else if (arg == "--help" || arg == "-h") {
      std::puts("usage: odc_parity_dump --case CASE.json --out DIR");
      return 0;
    } else {
      std::fprintf(stderr, "odc_parity_dump: unexpected argument '%s'\n", arg.c_str());
      return 2;
    }
  }
  if (case_path.empty() || out_dir.empty()) {
    std::fprintf(stderr, "usage: odc_parity_dump --case CASE.json --out DIR\n");
    return 2;
  }
  try {
    return run(case_path, out_dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "odc_parity_dump: error: %s\n", e.what());
    return 1;
  }
}
