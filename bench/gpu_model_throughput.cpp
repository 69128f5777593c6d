// gpu_model_throughput: training throughput of the whole model on one GPU, one rank (world 1).
//
//   gpu_model_throughput [--shape llama-1b|qwen2-1.5b] [--layers N] [--seqs N] [--seq-len N]
//                        [--tokens N,N,...] [--recompute none|selective|full]
//                        [--attention auto|native|cudnn] [--steps N] [--warmup N]
//                        [--peak-tflops X] [--cpu-tiny] [--profile FILE]
//
// Shapes: llama-1b (LLaMA-3.2-1B: 16 layers, hidden 2048, ffn 8192, 32/8 heads of 64, vocab
// 128256, tied embeddings; the default) and qwen2-1.5b (DeepSeek-R1-Distill-Qwen-1.5B, the paper
// reproduction's configs/gpu8/*-1.5b.yaml: 28 layers, hidden 1536, ffn 8960, 12/2 heads of 128,
// vocab 151936, untied, q/k/v biases). --layers overrides the shape's layer count.
//
// Cases: without --tokens one packed microbatch of SEQS sequences of SEQ_LEN tokens (default
// 8 x 1024 = 8K tokens: the 1B throughput case); with --tokens one case per count, each a
// microbatch of ONE sequence of that many tokens (the long-context case), run in ascending order in
// one process on the same weights.
//
// A step is one microbatch's forward, loss and backward into fp32 gradient accumulators resident
// on the device (bench::ResidentWeights), then AdamW on the device (Backend::adamw_step): the step
// bench/gpu_model_torch.py times for PyTorch. The first WARMUP steps are not timed; the median of
// the rest is reported. FLOPs are the model's training FLOPs (LlamaConfig::training_flops over the
// batch's causal pairs: the linear layers and LM head, 6 per parameter and token, and causal
// attention); a recomputed forward is not counted (MFU counts the model's work, not the run's).
// MFU is against --peak-tflops (default 989.5: the H200's dense bf16 tensor-core peak).
//
// Memory: before each case the memory model (train::plan_memory: world 1, the device, bf16,
// --recompute, the case's tokens) predicts what goes through the device allocator
// (MemoryPlan::pooled_bytes); this program adds the one allocation of its own that a trainer does
// not make (ResidentWeights' fp32 upload staging of the largest unit). After the case it prints the
// allocator's peak (Backend::allocator_peak_bytes: since the program started; cases run in
// ascending token order, so it is the case's own peak) and the error against the prediction. A
// case whose plan does not fit the device (its memory less the plan's 5% margin) is skipped with
// the plan's numbers.
//
// One JSON line per case: {"bench":"gpu_model_throughput","impl":"odc","shape":...,"tokens":...,
// "tokens_per_s":...,"step_ms":...,"flops_per_token":...,"tflops":...,"mfu":...,"recompute":...,
// "attention":...,"predicted_pooled_bytes":...,"measured_peak_bytes":...,"memory_error_pct":...}
// (a skipped case: "skipped" with the plan's bytes; a failed one: "error"). --plan-only prints each
// case's plan without a device (the verdict against --device-gib when given). --cpu-tiny runs a tiny
// shape on the CPU backend's bf16 mode instead (what CI can run: it proves the program, not the
// speed; the CPU has no allocator peak). Exits 77 without a device, 2 on a usage error, 1 when a
// case failed.
//
// --profile FILE (one case): after the timed steps, two more under the op profiler
// (backend/op_profiler.h: each op timed where it runs, CUDA events on the GPU, the host clock on
// the CPU; the GEMMs by role), the first warming its timeline, the second kept, each with the
// trainer's gradient norm the timed steps leave out; its table goes to stderr and its document
// (backend/op_profile.h) to FILE, and the case's line gets "profile_step_ms" and "profile_op_ms"
// (docs/performance.md, "Per-op profile").
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/command_line.h"
#include "cli/tool_main.h"
#include "bench_models.h"
#include "odc/backend/backend_factory.h"
#include "odc/backend/op_profile.h"
#include "odc/backend/op_profiler.h"
#include "odc/core/error.h"
#include "odc/core/random.h"
#include "odc/kernels/adamw.h"
#include "odc/model/llama_model.h"
#include "support/resident_weights.h"
#include "odc/model/recompute.h"
#include "odc/train/plan/memory_plan.h"

namespace {

struct Options {
  std::string shape = "llama-1b";
  int layers = 0;  // 0: the shape's
  int seqs = 8;
  int seq_len = 1024;
  std::vector<std::int64_t> tokens;  // --tokens: one single-sequence case per count
  odc::model::Recompute recompute = odc::model::Recompute::none;
  std::string attention = "auto";
  int steps = 10;
  int warmup = 3;
  double peak_tflops = 989.5;
  bool cpu_tiny = false;
  bool plan_only = false;  // --plan-only: each case's memory plan, no device needed
  double device_gib = 0;   // --device-gib: the device's memory for --plan-only's verdict (0: none)
  std::string profile;     // --profile: the op profile's file ("": none)
};

constexpr const char* kUsage =
    "usage: gpu_model_throughput [--shape llama-1b|qwen2-1.5b] [--layers N] [--seqs N] [--seq-len N]\n"
    "                            [--tokens N,N,...] [--recompute none|selective|full]\n"
    "                            [--attention auto|native|cudnn] [--steps N] [--warmup N] [--peak-tflops X]\n"
    "                            [--cpu-tiny] [--plan-only [--device-gib G]] [--profile FILE]\n";

Options parse(int argc, char** argv) {
  using odc::Range;
  using odc::cli::Takes;
  const odc::cli::Command command{
      "gpu_model_throughput", kUsage,
      {{"--shape"}, {"--layers"}, {"--seqs"}, {"--seq-len"}, {"--tokens"}, {"--recompute"}, {"--attention"},
       {"--steps"}, {"--warmup"}, {"--peak-tflops"}, {"--cpu-tiny", Takes::nothing}, {"--plan-only", Takes::nothing},
       {"--device-gib"}, {"--profile"}}};
  const auto args = odc::cli::parse(command, argc, argv);
  Options o;
  o.shape = args.choice("--shape", {"llama-1b", "qwen2-1.5b"}, o.shape);
  o.layers = static_cast<int>(args.integer("--layers", o.layers, Range::at_least(0).and_at_most(1 << 20)));
  o.seqs = static_cast<int>(args.integer("--seqs", o.seqs, Range::at_least(1).and_at_most(1 << 20)));
  o.seq_len = static_cast<int>(args.integer("--seq-len", o.seq_len, Range::at_least(2).and_at_most(1 << 20)));
  o.tokens = args.integer_list("--tokens", {}, Range::at_least(2).and_at_most(1 << 24));
  std::sort(o.tokens.begin(), o.tokens.end());
  o.recompute = odc::model::parse_recompute(args.choice("--recompute", {"none", "selective", "full"}, "none"),
                                            "--recompute");
  o.attention = args.choice("--attention", {"auto", "native", "cudnn"}, o.attention);
  o.steps = static_cast<int>(args.integer("--steps", o.steps, Range::at_least(1).and_at_most(1 << 20)));
  o.warmup = static_cast<int>(args.integer("--warmup", o.warmup, Range::at_least(0).and_at_most(1 << 20)));
  if (o.steps <= o.warmup) {
    throw args.usage_error("--steps (" + std::to_string(o.steps) + ") must exceed --warmup (" +
                           std::to_string(o.warmup) + "): the steps after the warm-up are the timed ones");
  }
  o.peak_tflops = args.number("--peak-tflops", o.peak_tflops, Range::above(0));
  o.device_gib = args.number("--device-gib", o.device_gib, Range::above(0));
  o.cpu_tiny = args.flag("--cpu-tiny");
  o.plan_only = args.flag("--plan-only");
  o.profile = args.value_or("--profile", "");
  if (!o.profile.empty() && (o.plan_only || o.tokens.size() > 1)) {
    throw args.usage_error("--profile profiles one case on a device: not with --plan-only or several --tokens");
  }
  return o;
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
    c.num_hidden_layers = 2;
    c.tie_word_embeddings = o.shape == "llama-1b";
    c.attention_bias = o.shape == "qwen2-1.5b";
  } else if (o.shape == "qwen2-1.5b") {
    c = odc::bench::qwen2_1_5b_shape();
  } else {
    c = odc::bench::llama_1b_shape();
  }
  if (o.layers > 0) c.num_hidden_layers = o.layers;
  std::int64_t longest = o.seq_len;
  for (const std::int64_t t : o.tokens) longest = std::max(longest, t);
  c.max_position_embeddings = std::max<std::int64_t>(longest, 2048);
  return c;
}

std::string shape_text(const odc::model::LlamaConfig& c) {
  return "L" + std::to_string(c.num_hidden_layers) + " d" + std::to_string(c.hidden_size) + " ff" +
         std::to_string(c.intermediate_size) + " h" + std::to_string(c.num_attention_heads) + "/" +
         std::to_string(c.num_key_value_heads) + "x" + std::to_string(c.head_dim) + " v" +
         std::to_string(c.vocab_size) + (c.tie_word_embeddings ? " tied" : " untied") +
         (c.attention_bias ? " qkv-bias" : "");
}

odc::model::PackedBatch batch_for(int seqs, std::int64_t seq_len, const odc::model::LlamaConfig& c) {
  odc::model::PackedBatch batch;
  odc::SplitMix64 rng(9);
  const float weight = 1.0f / static_cast<float>(static_cast<double>(seqs) * static_cast<double>(seq_len - 1));
  for (int s = 0; s < seqs; ++s) {
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(seq_len));
    for (auto& t : tokens) t = static_cast<std::int32_t>(rng.next() % static_cast<std::uint64_t>(c.vocab_size));
    std::vector<std::uint8_t> mask(tokens.size(), 1);
    batch.append(tokens.data(), mask.data(), seq_len, weight);
  }
  return batch;
}

struct Case {
  int seqs;
  std::int64_t seq_len;
};

std::unique_ptr<odc::backend::Backend> make(const Options& o, std::string& why) {
  if (o.cpu_tiny) return odc::backend::make_backend("cpu", odc::DType::bf16, 1, 0, "auto");
  if (!odc::backend::cuda_backend_built()) {
    why = "this build has no CUDA backend";
    return nullptr;
  }
  try {
    return odc::backend::make_backend("cuda", odc::DType::bf16, 1, 0, o.attention);
  } catch (const odc::Error& e) {
    why = e.what();
    return nullptr;
  }
}

// A case's memory plan (train::plan_memory at world 1) into `line`; returns the bytes predicted
// through the device allocator: the plan's pooled items and this program's upload staging.
std::int64_t plan_case(const Options& o, const odc::model::LlamaConfig& config, std::int64_t tokens,
                       nlohmann::json& line) {
  odc::train::MemoryInputs in;
  in.model = config;
  in.world = 1;
  in.device = o.cpu_tiny ? odc::DeviceKind::cpu : odc::DeviceKind::cuda;
  in.compute = odc::DType::bf16;
  in.recompute = o.recompute;
  in.tokens = tokens;
  const odc::train::MemoryPlan plan = odc::train::plan_memory(in);
  std::int64_t largest = 0;
  for (const auto& unit : odc::model::build_unit_layouts(config)) largest = std::max(largest, unit.numel);
  const std::int64_t staging = largest * 4;  // ResidentWeights' fp32 upload staging (no trainer has it)
  line["plan_pooled_bytes"] = plan.pooled_bytes();
  line["bench_staging_bytes"] = staging;
  line["predicted_pooled_bytes"] = plan.pooled_bytes() + staging;
  line["plan_peak_bytes"] = plan.peak_bytes() + staging;
  line["plan_activation_bytes"] = plan.activation_bytes();
  return plan.pooled_bytes() + staging;
}

// Whether the plan fits `capacity` bytes less the plan's margin; says why not in line["skipped"].
bool fits(std::int64_t capacity, nlohmann::json& line) {
  const auto budget = static_cast<std::int64_t>(static_cast<double>(capacity) * (1.0 - odc::train::kBudgetMargin));
  line["device_budget_bytes"] = budget;
  const std::int64_t peak = line["plan_peak_bytes"].get<std::int64_t>();
  if (capacity <= 0 || peak <= budget) return true;
  line["skipped"] = "the memory plan (" + std::to_string(peak >> 20) + " MiB) exceeds the device's budget (" +
                    std::to_string(budget >> 20) + " MiB: its memory less " +
                    std::to_string(static_cast<int>(100 * odc::train::kBudgetMargin)) + "%)";
  return false;
}

nlohmann::json case_head(const Options& o, const odc::model::LlamaConfig& config, const Case& k) {
  return {{"bench", "gpu_model_throughput"}, {"impl", "odc"},
          {"shape", shape_text(config) + " " + std::to_string(k.seqs) + "x" + std::to_string(k.seq_len)},
          {"model", o.cpu_tiny ? "cpu-tiny" : o.shape}, {"tokens", static_cast<std::int64_t>(k.seqs) * k.seq_len},
          {"seqs", k.seqs}, {"recompute", std::string(odc::model::recompute_name(o.recompute))}, {"world", 1}};
}

// One case: its JSON line (timed, skipped by the plan, or failed).
nlohmann::json run_case(const Options& o, const Case& k, odc::model::LlamaModel& model,
                        odc::bench::ResidentWeights& weights, const std::string& attention) {
  const odc::model::LlamaConfig& config = model.config();
  odc::backend::Backend& b = model.backend();
  const std::int64_t tokens = static_cast<std::int64_t>(k.seqs) * k.seq_len;
  nlohmann::json line = case_head(o, config, k);
  line["backend"] = std::string(b.name());
  line["attention"] = attention;
  const std::int64_t predicted = plan_case(o, config, tokens, line);
  if (!fits(o.cpu_tiny ? 0 : b.memory_capacity(1), line)) return line;
  const odc::model::PackedBatch batch = batch_for(k.seqs, k.seq_len, config);
  std::vector<double> ms;
  double loss = 0.0, first_ms = 0.0;
  try {
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
      if (step == 0) first_ms = took;
      if (step >= o.warmup) ms.push_back(took);
    }
  } catch (const odc::Error& e) {
    line["error"] = e.what();
    line["measured_peak_bytes"] = b.allocator_peak_bytes();
    return line;
  }
  std::sort(ms.begin(), ms.end());
  const double step_ms = ms[ms.size() / 2];
  const double flops = config.training_flops(static_cast<double>(tokens), batch.causal_pairs());
  const double tflops = flops / (step_ms * 1e-3) / 1e12;
  line["tokens_per_s"] = static_cast<double>(tokens) / (step_ms * 1e-3);
  line["step_ms"] = step_ms;
  line["first_step_ms"] = first_ms;
  line["timed_steps"] = ms.size();
  line["flops_per_token"] = flops / static_cast<double>(tokens);
  line["attention_flops_share"] = config.attention_flops_per_pair() * batch.causal_pairs() / flops;
  line["tflops"] = tflops;
  line["mfu"] = tflops / o.peak_tflops;
  line["peak_tflops"] = o.peak_tflops;
  line["optimizer"] = "adamw";
  line["loss"] = loss;
  const std::int64_t measured = b.allocator_peak_bytes();
  if (measured > 0) {
    line["measured_peak_bytes"] = measured;
    line["memory_error_pct"] = 100.0 * static_cast<double>(measured - predicted) / static_cast<double>(predicted);
  }
  return line;
}

// --profile: a step (the timed steps' microbatch, then the trainer's gradient norm, which the
// timed steps leave out as the PyTorch peer does, and AdamW) with the profiler recording, twice,
// the second kept: the first fills the timeline's pool of events (creating an event is host work,
// which mid-step would open gaps the device idles in). Its table goes to stderr, its document to
// the file. The step's wall seconds run from the first op's issue to the device's end of the last.
void profile_case(const Options& o, const Case& k, odc::model::LlamaModel& model, odc::bench::ResidentWeights& weights,
                  odc::backend::ProfilingBackend& profiler, const std::string& attention, nlohmann::json& line) {
  odc::backend::Backend& b = model.backend();
  const odc::model::LlamaConfig& c = model.config();
  const odc::model::PackedBatch batch = batch_for(k.seqs, k.seq_len, c);
  const auto step = [&](int number) {
    weights.zero_gradients();
    b.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    profiler.start();
    model.train_microbatch(batch, weights, weights);
    for (int u = 0; u < weights.num_units(); ++u) {  // the norm's value is not the point: its time is
      b.sum_of_squares(b.gradients(weights.grad_buffer(u), model.units()[static_cast<std::size_t>(u)].numel));
    }
    odc::kernels::AdamWParams p;
    p.lr = 1e-4;
    p.step = number;
    weights.adamw_step(p);
    b.synchronize();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return std::make_pair(profiler.stop(), seconds);
  };
  step(o.steps + 1);
  auto [profile, seconds] = step(o.steps + 2);
  odc::backend::ProfileDocument doc;
  doc.profile = std::move(profile);
  doc.shape = line["shape"].get<std::string>();
  doc.tokens = batch.num_tokens();
  doc.sequences = batch.num_seqs();
  doc.layers = c.num_hidden_layers;
  doc.hidden = c.hidden_size;
  doc.q_dim = c.q_dim();
  doc.kv_dim = c.kv_dim();
  doc.intermediate = c.intermediate_size;
  doc.vocab = c.vocab_size;
  doc.recompute = std::string(odc::model::recompute_name(o.recompute));
  doc.attention = attention;
  doc.device = b.device().kind == odc::DeviceKind::cuda ? "cuda" : "cpu";
  doc.device_description = b.describe().text;
  doc.step_seconds = seconds;
  std::ofstream out(o.profile);
  out << doc.to_json().dump(1) << "\n";
  if (!out.flush()) odc::fail("--profile: cannot write {}", o.profile);
  std::fputs(doc.table().c_str(), stderr);
  line["profile"] = o.profile;
  line["profile_step_ms"] = doc.step_seconds * 1e3;
  line["profile_op_ms"] = doc.profile.seconds() * 1e3;
}

int run(const Options& o) {
  std::vector<Case> cases;
  if (o.tokens.empty()) {
    cases.push_back({o.seqs, o.seq_len});
  } else {
    for (const std::int64_t t : o.tokens) cases.push_back({1, t});
  }
  int rc = 0;
  if (o.plan_only) {
    const odc::model::LlamaConfig config = shape(o);
    for (const Case& k : cases) {
      nlohmann::json line = case_head(o, config, k);
      line["plan_only"] = true;
      plan_case(o, config, line["tokens"].get<std::int64_t>(), line);
      fits(static_cast<std::int64_t>(o.device_gib * 1073741824.0), line);
      std::printf("%s\n", line.dump().c_str());
    }
    return 0;
  }
  std::string why;
  std::unique_ptr<odc::backend::Backend> backend = make(o, why);
  if (backend == nullptr) {
    std::fprintf(stderr, "SKIP: no CUDA backend (%s)\n", why.c_str());
    return 77;
  }
  const odc::model::LlamaConfig config = shape(o);
  const std::string attention =
      backend->select_attention(config.num_attention_heads, config.num_key_value_heads, config.head_dim);
  // --profile: the model runs on the profiler, which only forwards until its step.
  odc::backend::ProfilingBackend* profiler = nullptr;
  if (!o.profile.empty()) {
    auto wrapped = std::make_unique<odc::backend::ProfilingBackend>(
        std::move(backend), odc::backend::llama_gemm_classifier({config.hidden_size, config.q_dim(), config.kv_dim(),
                                                                config.intermediate_size, config.vocab_size}));
    profiler = wrapped.get();
    backend = std::move(wrapped);
  }
  odc::model::LlamaModel model(config, std::move(backend));
  model.set_recompute(o.recompute);
  odc::bench::ResidentWeights weights(model.backend(), model.units(), odc::bench::tiled_weights(model));
  for (const Case& k : cases) {
    nlohmann::json line = run_case(o, k, model, weights, attention);
    if (profiler != nullptr && !line.contains("error") && !line.contains("skipped")) {
      profile_case(o, k, model, weights, *profiler, attention, line);
    }
    std::printf("%s\n", line.dump().c_str());
    std::fflush(stdout);
    if (line.contains("error")) {
      rc = 1;
      break;  // ascending token counts: a larger case would fail the same way
    }
  }
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  return odc::cli::run_tool("gpu_model_throughput", [&] { return run(parse(argc, argv)); });
}
