// model_throughput: forward+backward throughput of LlamaModel::train_microbatch on one packed
// microbatch (fp32, CPU), next to the throughput of a single SGEMM of a comparable shape through
// the kernels' GEMM (odc/kernels/matmul.h) and the cores' FMA peak, so the result says how close
// the model gets to what the GEMM path can do (sgemm_fraction) and to what the cores can do
// (core_fraction); it names the GEMM library, its ISA and kernel, and the CPU's ISA.
//
//   model_throughput --layers 4 --hidden 256 --heads 8 --kv-heads 4 --intermediate 688
//                    --vocab 64 --seqs 256,512,1024 --threads 1 --iters 5 [--recompute none,selective,full]
//
// --dtype bfloat16 runs the CPU bf16 mode; --weight-copies each,kept then times a step of
// --step-microbatches microbatches with the weights' bf16 copies made at every acquire against
// kept through the step (Backend::keep_weight_copies), in turns: "weight_copies".
// Prints one JSON line. With --recompute naming several modes (train.recompute), each is timed in
// the same run, in turn over --iters rounds, and "recompute" holds each mode's seconds per
// iteration, its activation bytes and its time against the first mode (the CPU cost of
// recomputation); the top-level figures are the first mode's. FLOP count ("model FLOPs", the MFU convention: what the math needs, not
// what the implementation executes, so recomputation in the backward is not counted):
//   linear:    6 * (matmul parameters incl. the LM head) per token       (2 fwd + 4 bwd per MAC)
//   attention: per layer and sequence of length n, QK^T and PV over the causal triangle are
//              2 matmuls * 2 FLOP/MAC * q_dim * n(n+1)/2 = 2 * q_dim * n(n+1) forward, and the
//              backward is twice the forward:  6 * q_dim * n(n+1) per layer.
// Norms, RoPE, SwiGLU, softmax and the cross-entropy are not counted (O(tokens * hidden)).

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/command_line.h"
#include "cli/tool_main.h"

#include "odc/backend/cpu_backend.h"
#include "odc/core/cpu_features.h"
#include "odc/core/dtype.h"
#include "odc/core/error.h"
#include "odc/kernels/matmul.h"
#include "odc/model/batch.h"
#include "odc/model/llama_config.h"
#include "odc/model/llama_model.h"
#include "odc/model/recompute.h"
#include "support/resident_weights.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int layers = 4;
  std::int64_t hidden = 256;
  int heads = 8;
  int kv_heads = 4;
  int head_dim = 0;  // 0: hidden / heads
  std::int64_t intermediate = 688;
  std::int64_t vocab = 64;
  std::vector<std::int64_t> seqs = {256, 512, 1024};
  int threads = 1;
  int iters = 5;
  int warmup = 2;
  std::uint64_t seed = 0;
  std::vector<odc::model::Recompute> recompute = {odc::model::Recompute::none};
  odc::DType dtype = odc::DType::f32;          // --dtype: float32, or bfloat16 (the CPU bf16 mode)
  bool compare_weight_copies = false;          // --weight-copies each,kept
  int step_microbatches = 8;                   // --step-microbatches: microbatches per optimizer step
};

constexpr const char* kUsage =
    "usage: model_throughput [--layers N] [--hidden N] [--heads N] [--kv-heads N] [--head-dim N]\n"
    "                        [--intermediate N] [--vocab N] [--seqs L1,L2,...] [--threads N]\n"
    "                        [--iters N] [--warmup N] [--seed N] [--recompute M1,M2,...]\n"
    "                        [--dtype float32|bfloat16] [--weight-copies each,kept [--step-microbatches N]]\n"
    "Times LlamaModel::train_microbatch on one packed microbatch of the given sequence lengths and\n"
    "a comparable SGEMM; prints one JSON line.\n";

Options parse_options(int argc, char** argv) {
  using odc::Range;
  const odc::cli::Command command{
      "model_throughput", kUsage,
      {{"--layers"}, {"--hidden"}, {"--heads"}, {"--kv-heads"}, {"--head-dim"}, {"--intermediate"}, {"--vocab"},
       {"--seqs"}, {"--threads"}, {"--iters"}, {"--warmup"}, {"--seed"}, {"--recompute"}, {"--dtype"},
       {"--weight-copies"}, {"--step-microbatches"}}};
  const auto args = odc::cli::parse(command, argc, argv);
  const auto count = Range::at_least(1).and_at_most(1 << 20);
  Options o;
  o.layers = static_cast<int>(args.integer("--layers", o.layers, count));
  o.hidden = args.integer("--hidden", o.hidden, Range::at_least(1));
  o.heads = static_cast<int>(args.integer("--heads", o.heads, count));
  o.kv_heads = static_cast<int>(args.integer("--kv-heads", o.kv_heads, count));
  o.head_dim = static_cast<int>(args.integer("--head-dim", o.head_dim, Range::at_least(0).and_at_most(1 << 20)));
  o.intermediate = args.integer("--intermediate", o.intermediate, Range::at_least(1));
  o.vocab = args.integer("--vocab", o.vocab, Range::at_least(1));
  o.seqs = args.integer_list("--seqs", o.seqs, Range::at_least(2));
  o.threads = static_cast<int>(args.integer("--threads", o.threads, count));
  o.iters = static_cast<int>(args.integer("--iters", o.iters, count));
  o.warmup = static_cast<int>(args.integer("--warmup", o.warmup, Range::at_least(0).and_at_most(1 << 20)));
  o.seed = args.integer<std::uint64_t>("--seed", 0);
  o.step_microbatches = static_cast<int>(args.integer("--step-microbatches", o.step_microbatches, count));
  // The library's own parsers name what they accept; their mistakes are command-line mistakes here.
  try {
    if (const auto dtype = args.value("--dtype")) o.dtype = odc::parse_dtype(*dtype);
    if (args.value("--recompute")) {
      o.recompute.clear();
      for (const auto& item : args.list("--recompute", {})) {
        o.recompute.push_back(odc::model::parse_recompute(item, "--recompute"));
      }
    }
  } catch (const odc::Error& e) {
    throw args.usage_error(e.what());
  }
  if (const auto copies = args.value("--weight-copies")) {
    if (*copies != "each,kept") {
      throw args.usage_error("--weight-copies takes each,kept (both are timed side by side), got '" + *copies + "'");
    }
    o.compare_weight_copies = true;
  }
  return o;
}

template <typename F>
double seconds_per_call(int warmup, int iters, F&& body) {
  for (int i = 0; i < warmup; ++i) body();
  const auto start = Clock::now();
  for (int i = 0; i < iters; ++i) body();
  return std::chrono::duration<double>(Clock::now() - start).count() / iters;
}

int run(const Options& o) {
  nlohmann::json hf = {{"vocab_size", o.vocab},
                       {"hidden_size", o.hidden},
                       {"intermediate_size", o.intermediate},
                       {"num_hidden_layers", o.layers},
                       {"num_attention_heads", o.heads},
                       {"num_key_value_heads", o.kv_heads}};
  if (o.head_dim > 0) hf["head_dim"] = o.head_dim;
  const auto config = odc::model::LlamaConfig::from_json(hf, "command line", true);
  config.validate("command line");

  if (o.compare_weight_copies && o.dtype == odc::DType::f32) {
    odc::fail("--weight-copies compares the bf16 mode's copies: add --dtype bfloat16 (float32 makes none)");
  }
  if (o.step_microbatches < 1) odc::fail("--step-microbatches must be at least 1");
  odc::model::LlamaModel model(config, std::make_unique<odc::backend::CpuBackend>(o.threads, o.dtype));
  // Gradients keep accumulating across iterations: the values are irrelevant to the timing and
  // zeroing them is the trainer's cost, not the model's.
  odc::bench::ResidentWeights weights(model.units(), config, o.seed);

  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<std::int32_t> token(0, static_cast<std::int32_t>(o.vocab - 1));
  std::int64_t tokens = 0;
  for (auto n : o.seqs) tokens += n;
  const float weight = 1.0f / static_cast<float>(tokens - static_cast<std::int64_t>(o.seqs.size()));
  odc::model::PackedBatch batch;
  for (auto n : o.seqs) {
    std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
    for (auto& id : ids) id = token(rng);
    batch.append(ids.data(), nullptr, n, weight);
  }

  double loss = 0.0;
  // Each mode: warm-up, then rounds over the modes in turn (so drift of the machine's speed falls
  // on every mode alike), the mean per mode.
  const std::size_t modes = o.recompute.size();
  std::vector<double> mode_seconds(modes, 0.0);
  std::vector<std::int64_t> mode_bytes(modes, 0);
  for (std::size_t i = 0; i < modes; ++i) {
    model.set_recompute(o.recompute[i]);
    for (int w = 0; w < o.warmup; ++w) loss = model.train_microbatch(batch, weights, weights).weighted_loss;
    mode_bytes[i] = model.activation_bytes();
  }
  for (int it = 0; it < o.iters; ++it) {
    for (std::size_t i = 0; i < modes; ++i) {
      model.set_recompute(o.recompute[i]);
      const auto start = Clock::now();
      loss = model.train_microbatch(batch, weights, weights).weighted_loss;
      mode_seconds[i] += std::chrono::duration<double>(Clock::now() - start).count() / o.iters;
    }
  }
  // Weight copies made at every acquire against kept through a step of --step-microbatches
  // microbatches (Backend::keep_weight_copies, as one rank trains): the first mode, in turns.
  nlohmann::json copies = nullptr;
  if (o.compare_weight_copies) {
    model.set_recompute(o.recompute[0]);
    double each = 0.0, kept = 0.0;
    for (int it = 0; it < o.iters; ++it) {
      for (const bool keep : {false, true}) {
        model.backend().keep_weight_copies(keep);
        const auto start = Clock::now();
        for (int m = 0; m < o.step_microbatches; ++m) loss = model.train_microbatch(batch, weights, weights).weighted_loss;
        model.backend().weights_changed();  // the optimizer step
        (keep ? kept : each) += std::chrono::duration<double>(Clock::now() - start).count() / o.iters;
      }
    }
    model.backend().keep_weight_copies(false);
    copies = {{"step_microbatches", o.step_microbatches},
              {"each_seconds_per_step", each},
              {"kept_seconds_per_step", kept},
              {"kept_vs_each", kept / each}};
  }
  const double model_seconds = mode_seconds[0];
  nlohmann::json per_mode = nlohmann::json::object();
  for (std::size_t i = 0; i < modes; ++i) {
    // activation_bytes grows to the largest mode run so far: report each mode's own prediction.
    const auto predicted = odc::model::activation_bytes(config, model.backend().activation_dtype(), tokens, o.recompute[i],
                                                        model.backend().head_chunk_rows(config.vocab_size),
                                                        static_cast<std::int64_t>(o.seqs.size()), false);
    per_mode[std::string(odc::model::recompute_name(o.recompute[i]))] = {
        {"seconds_per_iter", mode_seconds[i]},
        {"time_vs_first", mode_seconds[i] / mode_seconds[0]},
        {"activation_bytes", predicted.total()}};
  }

  double attention_flops = 0.0;
  for (auto n : o.seqs) {
    attention_flops += 6.0 * static_cast<double>(config.q_dim()) * static_cast<double>(n) *
                       static_cast<double>(n + 1) * config.num_hidden_layers;
  }
  const double linear_flops = config.linear_flops_per_token() * static_cast<double>(tokens);
  const double model_flops = linear_flops + attention_flops;

  // The MLP gate projection of the whole microbatch: x[tokens, hidden] * W[intermediate, hidden]^T,
  // the most common matmul shape in the model.
  const std::int64_t m = tokens, n = o.intermediate, k = o.hidden;
  std::vector<float> a(static_cast<std::size_t>(m * k), 0.01f);
  std::vector<float> b(static_cast<std::size_t>(n * k), 0.02f);
  std::vector<float> c(static_cast<std::size_t>(m * n), 0.0f);
  const int sgemm_iters = std::max(3, o.iters);
  const double sgemm_seconds = seconds_per_call(1, sgemm_iters, [&] {
    odc::kernels::cpu::gemm<float>(false, true, m, n, k, 1.0f, a.data(), k, b.data(), k, 0.0f, c.data(), n);
  });
  const double sgemm_gflops = 2.0 * static_cast<double>(m * n * k) / sgemm_seconds / 1e9;
  const double gflops_model = model_flops / model_seconds / 1e9;
  // The cores' ceiling: one core's FMA-loop peak times the threads (core/cpu_features.h).
  const double core_peak_gflops = odc::measure_fma_peak_flops(o.threads) / 1e9;
  const odc::CpuFeatures cpu = odc::detect_cpu_features();
  const odc::kernels::cpu::GemmInfo gemm = odc::kernels::cpu::gemm_info();

  nlohmann::json out = {{"bench", "model_throughput_cpp"},
                        {"layers", o.layers},
                        {"hidden", o.hidden},
                        {"heads", o.heads},
                        {"kv_heads", o.kv_heads},
                        {"head_dim", config.head_dim},
                        {"intermediate", o.intermediate},
                        {"vocab", o.vocab},
                        {"seqs", o.seqs},
                        {"tokens", tokens},
                        {"threads", o.threads},
                        {"iters", o.iters},
                        {"loss", loss},
                        {"seconds_per_iter", model_seconds},
                        {"tokens_per_s", static_cast<double>(tokens) / model_seconds},
                        {"flops_per_iter", model_flops},
                        {"attention_flops_fraction", attention_flops / model_flops},
                        {"gflops_model", gflops_model},
                        {"sgemm_shape", {m, n, k}},
                        {"sgemm_gflops", sgemm_gflops},
                        {"sgemm_fraction", gflops_model / sgemm_gflops},
                        {"gemm_peak_gflops", sgemm_gflops},
                        {"core_peak_gflops", core_peak_gflops},
                        {"core_fraction", gflops_model / core_peak_gflops},
                        {"gemm_library", gemm.library},
                        {"gemm_isa", gemm.isa},
                        {"gemm_kernel", gemm.kernel},
                        {"cpu", cpu.name},
                        {"cpu_isa", cpu.isa},
                        {"fma_path", cpu.fma_path},
                        {"activation_bytes", mode_bytes[0]},
                        {"recompute", per_mode},
                        {"dtype", std::string(odc::dtype_name(o.dtype))},
                        {"weight_copies", copies}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return odc::cli::run_tool("model_throughput", [&] { return run(parse_options(argc, argv)); });
}
