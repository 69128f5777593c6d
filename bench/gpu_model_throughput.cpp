// gpu_model_throughput: training throughput of the whole model on one GPU at a 1B shape
// (LLaMA-3.2-1B: 16 layers, hidden 2048, ffn 8192, 32/8 heads, vocab 128256, tied embeddings),
// on packed microbatches of SEQS sequences of SEQ_LEN tokens (default 8 x 1024 = 8K tokens).
//
//   gpu_model_throughput [--layers N] [--seqs N] [--seq-len N] [--steps N] [--warmup N] [--cpu-tiny]
//
// A step is one microbatch's forward, loss and backward into fp32 gradient accumulators resident
// on the device (BackendWeights), then AdamW on the device (Backend::adamw_step): the step
// bench/gpu_model_torch.py times for PyTorch.
// The first WARMUP steps are not timed; the median of the rest is reported. FLOPs per token are
// counted as bench/gpu_model_torch.py counts them: 6 x (layer matmul parameters + LM head) +
// 6 x layers x hidden x (SEQ_LEN + 1) for the causal attention.
//
// One JSON line: {"bench":"gpu_model_throughput","impl":"odc","shape":...,"tokens_per_s":...,
// "step_ms":...,"flops_per_token":...,"loss":...}. --cpu-tiny runs a tiny shape on the CPU
// backend's bf16 mode instead (what CI can run: it proves the program, not the speed). Exits 77 without a
// device, 2 on a usage error.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend_weights.h"
#include "odc/core/random.h"
#include "odc/kernels/adamw.h"
#include "odc/model/llama_model.h"

namespace {

struct Options {
  int layers = 16;
  int seqs = 8;
  int seq_len = 1024;
  int steps = 10;
  int warmup = 3;
  bool cpu_tiny = false;
};

constexpr const char* kUsage =
    "usage: gpu_model_throughput [--layers N] [--seqs N] [--seq-len N] [--steps N] [--warmup N] [--cpu-tiny]\n";

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--cpu-tiny") {
      o.cpu_tiny = true;
      continue;
    }
    int* target = arg == "--layers" ? &o.layers : arg == "--seqs" ? &o.seqs : arg == "--seq-len" ? &o.seq_len
                : arg == "--steps" ? &o.steps : arg == "--warmup" ? &o.warmup : nullptr;
    if (target == nullptr || i + 1 >= argc) return false;
    char* end = nullptr;
    const long v = std::strtol(argv[++i], &end, 10);
    if (*end != '\0' || v < 0 || v > 1 << 20) return false;
    *target = static_cast<int>(v);
  }
  return o.layers >= 1 && o.seqs >= 1 && o.seq_len >= 2 && o.steps > o.warmup;
}

odc::model::LlamaConfig shape(const Options& o) {
  odc::model::LlamaConfig c;
  if (o.cpu_tiny) {
    c.vocab_size = 512;
    c.hidden_size = 128;
    c.intermediate_size = 256;
    c.num_attention_heads = 2;
    c.num_key_value_heads = 1;
    c.head_dim = 64;
  } else {
    c.vocab_size = 128256;
    c.hidden_size = 2048;
    c.intermediate_size = 8192;
    c.num_attention_heads = 32;
    c.num_key_value_heads = 8;
    c.head_dim = 64;
    c.rope_theta = 500000.0;
  }
  c.num_hidden_layers = o.layers;
  c.tie_word_embeddings = true;
  c.max_position_embeddings = std::max(o.seq_len, 2048);
  return c;
}

// Weights of the right scale (std 0.02 matrices, unit norm weights) without the cost of drawing
// 1.2e9 normals: a 64K-value normal pattern tiled over each unit. Speed does not depend on values.
std::vector<std::vector<float>> weights_for(const odc::model::LlamaModel& model) {
  std::vector<float> pattern(1 << 16);
  odc::SplitMix64 rng(5);
  for (auto& p : pattern) p = static_cast<float>(0.02 * odc::normal_from_bits(rng.next(), rng.next()));
  std::vector<std::vector<float>> out;
  for (const auto& unit : model.units()) {
    std::vector<float> w(static_cast<std::size_t>(unit.numel));
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = pattern[i % pattern.size()];
    for (const auto& t : unit.tensors) {
      if (t.name.find("norm") != std::string::npos) {
        std::fill_n(w.begin() + t.offset, t.numel, 1.0f);
      }
    }
    out.push_back(std::move(w));
  }
  return out;
}

odc::model::PackedBatch batch_for(const Options& o, const odc::model::LlamaConfig& c) {
  odc::model::PackedBatch batch;
  odc::SplitMix64 rng(9);
  const float weight = 1.0f / static_cast<float>(o.seqs * (o.seq_len - 1));
  for (int s = 0; s < o.seqs; ++s) {
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(o.seq_len));
    for (auto& t : tokens) t = static_cast<std::int32_t>(rng.next() % static_cast<std::uint64_t>(c.vocab_size));
    std::vector<std::uint8_t> mask(tokens.size(), 1);
    batch.append(tokens.data(), mask.data(), o.seq_len, weight);
  }
  return batch;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::fputs(kUsage, stdout);
      return 0;
    }
  }
  if (!parse(argc, argv, o)) {
    std::fprintf(stderr, "gpu_model_throughput: bad arguments\n%s", kUsage);
    return 2;
  }
  try {
    std::string why;
    std::unique_ptr<odc::backend::Backend> backend =
        o.cpu_tiny ? odc::backend::make_backend("cpu", odc::DType::bf16, 1) : odc::bench::try_cuda_backend(why);
    if (backend == nullptr) {
      std::fprintf(stderr, "SKIP: no CUDA backend (%s)\n", why.c_str());
      return 77;
    }
    const odc::model::LlamaConfig config = shape(o);
    odc::model::LlamaModel model(config, std::move(backend));
    odc::backend::Backend& b = model.backend();
    odc::bench::BackendWeights weights(b, model.units(), weights_for(model));
    const odc::model::PackedBatch batch = batch_for(o, config);
    std::vector<double> ms;
    double loss = 0.0;
    for (int step = 0; step < o.steps; ++step) {
      const auto t0 = std::chrono::steady_clock::now();
      weights.zero_gradients();
      loss = model.train_microbatch(batch, weights, weights).weighted_loss;
      odc::kernels::AdamWParams p;
      p.lr = 1e-4;
      p.step = step + 1;
      weights.adamw_step(p);
      b.synchronize();
      const double took = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (step >= o.warmup) ms.push_back(took);
    }
    std::sort(ms.begin(), ms.end());
    const double step_ms = ms[ms.size() / 2];
    const double tokens = static_cast<double>(batch.num_tokens());
    const double d = config.hidden_size, kv = config.num_key_value_heads * config.head_dim;
    const double layer_params = config.num_hidden_layers * (2 * d * d + 2 * d * kv + 3 * d * config.intermediate_size);
    const double flops_per_token = 6 * (layer_params + static_cast<double>(config.vocab_size) * d) +
                                   6.0 * config.num_hidden_layers * d * (o.seq_len + 1);
    const nlohmann::json line = {
        {"bench", "gpu_model_throughput"}, {"impl", "odc"}, {"backend", std::string(b.name())},
        {"shape", "L" + std::to_string(o.layers) + " d" + std::to_string(config.hidden_size) + " ff" +
                      std::to_string(config.intermediate_size) + " h" + std::to_string(config.num_attention_heads) +
                      "/" + std::to_string(config.num_key_value_heads) + " v" + std::to_string(config.vocab_size) +
                      " " + std::to_string(o.seqs) + "x" + std::to_string(o.seq_len)},
        {"tokens_per_s", tokens / (step_ms * 1e-3)}, {"step_ms", step_ms}, {"flops_per_token", flops_per_token},
        {"optimizer", "adamw"}, {"loss", loss}};
    std::printf("%s\n", line.dump().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_model_throughput: %s\n", e.what());
    return 1;
  }
  return 0;
}
