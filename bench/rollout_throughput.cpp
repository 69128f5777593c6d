// rollout_throughput: new tokens per second of train::sample_rollouts (GRPO's sampling step) at
// several concurrencies (sequences decoded together), with the batched decode attention
// (Backend::attention_decode_batch: one parallel region on the CPU, one launch per layer on a
// GPU) and the per-sequence path beside it in the same run (the Backend default: two copies and
// one attention_cached per sequence and layer; Backend::set_per_sequence_decode); --paths picks
// one of them alone.
//
//   rollout_throughput [--shape tiny|llama-1b] [--layers N] [--hidden N] [--heads N] [--kv-heads N]
//                      [--head-dim N] [--intermediate N] [--vocab N] [--device cpu|cuda]
//                      [--dtype float32|bfloat16] [--threads N] [--concurrency 8,64,256]
//                      [--new-tokens N] [--prompt N] [--temperature T] [--top-k K] [--reps N]
//                      [--paths both|batched|per_sequence]
//
// Shapes: tiny (the default: 4 layers, hidden 256, 8/2 heads of 32, ffn 688, vocab 4096; seconds on
// two CPU cores) and llama-1b (LLaMA-3.2-1B: 16 layers, hidden 2048, ffn 8192, 32/8 heads of 64,
// vocab 128256, tied), each overridable by the flags. --dtype and --threads are the CPU backend's
// (CUDA computes in bf16). Weights: a 64K-value normal pattern (std 0.02) tiled over each unit,
// norms 1, as gpu_model_throughput does (a 1B model's init would take longer than the run; speed
// does not depend on the values).
//
// Each case is CONCURRENCY prompts, one completion each (all decode together), of exactly NEW
// tokens (default 32; no eos id), drawn at --temperature (default 1) among --top-k (default 0: the
// whole vocabulary), rl.temperature's and rl.top_k's defaults; prompt lengths are drawn in
// [PROMPT/2, 3 PROMPT/2] (default 16: ragged caches). Weight copies are kept across forwards, as a
// one-rank trainer keeps them (Backend::keep_weight_copies). The time is sample_rollouts' wall
// time, the best of REPS (the paths taking turns), prefills and the host's sampling included: what
// a GRPO step spends; model_s is the part inside the model's forwards (from the embedding's
// acquire to the last release, the logits' download included), the rest being the host's sampling
// and bookkeeping. A short run per path warms up first. The two paths must draw the same
// completions (their attention is bitwise the same): a difference is an error.
//
// One JSON line per (path, concurrency): {"bench":"rollout_throughput","path":"batched" |
// "per_sequence","concurrency":C,"new_tokens":N,"tokens":C*N,"seconds":s,"tokens_per_s":...,
// "model_s":...,"device":...,"threads":...,"shape":"tiny"|"llama-1b","dims":...} and, with both
// paths, "batched_over_per_sequence" (the ratio of their tokens_per_s) and
// "model_batched_over_per_sequence" (the same of the time in the model alone) on both lines.
// Exits 77 when --device cuda finds no CUDA backend or device, 2 on a usage error, 1 on an error.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/command_line.h"
#include "cli/tool_main.h"
#include "bench_models.h"
#include "odc/backend/backend_factory.h"
#include "odc/core/error.h"
#include "odc/core/random.h"
#include "odc/model/llama_model.h"
#include "support/resident_weights.h"
#include "odc/train/rollout/rollout_sampling.h"

namespace {

struct Options {
  std::string shape = "tiny";
  odc::model::LlamaConfig config;
  std::string device = "cpu";
  odc::DType dtype = odc::DType::f32;
  int threads = 2;
  std::vector<std::int64_t> concurrency = {8, 64, 256};
  std::int64_t new_tokens = 32;
  std::int64_t prompt = 16;
  double temperature = 1.0;
  std::int64_t top_k = 0;
  int reps = 1;
  std::vector<std::string> paths = {"per_sequence", "batched"};
};

constexpr const char* kUsage =
    "usage: rollout_throughput [--shape tiny|llama-1b] [--layers N] [--hidden N] [--heads N] [--kv-heads N]\n"
    "                          [--head-dim N] [--intermediate N] [--vocab N] [--device cpu|cuda]\n"
    "                          [--dtype float32|bfloat16] [--threads N] [--concurrency C1,C2,...]\n"
    "                          [--new-tokens N] [--prompt N] [--temperature T] [--top-k K] [--reps N]\n"
    "                          [--paths both|batched|per_sequence]\n"
    "New tokens per second of sample_rollouts at each concurrency, with the batched decode attention and\n"
    "the per-sequence one (the Backend default), and their ratio. One JSON line per (path, concurrency).\n";

odc::model::LlamaConfig base_shape(const std::string& shape) {
  odc::model::LlamaConfig c;
  if (shape == "llama-1b") {
    c = odc::bench::llama_1b_shape();
  } else {
    c.vocab_size = 4096;
    c.hidden_size = 256;
    c.intermediate_size = 688;
    c.num_hidden_layers = 4;
    c.num_attention_heads = 8;
    c.num_key_value_heads = 2;
    c.head_dim = 32;
  }
  return c;
}

Options parse(int argc, char** argv) {
  using odc::Range;
  const odc::cli::Command command{
      "rollout_throughput", kUsage,
      {{"--shape"}, {"--layers"}, {"--hidden"}, {"--heads"}, {"--kv-heads"}, {"--head-dim"}, {"--intermediate"},
       {"--vocab"}, {"--device"}, {"--dtype"}, {"--threads"}, {"--concurrency"}, {"--new-tokens"}, {"--prompt"},
       {"--temperature"}, {"--top-k"}, {"--reps"}, {"--paths"}}};
  const auto args = odc::cli::parse(command, argc, argv);
  Options o;
  o.shape = args.choice("--shape", {"tiny", "llama-1b"}, o.shape);
  auto& c = o.config = base_shape(o.shape);
  const auto positive = Range::at_least(1).and_at_most(1 << 20);
  c.num_hidden_layers = static_cast<int>(args.integer("--layers", c.num_hidden_layers, positive));
  c.hidden_size = args.integer("--hidden", c.hidden_size, positive);
  c.num_attention_heads = static_cast<int>(args.integer("--heads", c.num_attention_heads, positive));
  c.num_key_value_heads = static_cast<int>(args.integer("--kv-heads", c.num_key_value_heads, positive));
  c.head_dim = static_cast<int>(args.integer("--head-dim", c.head_dim, positive));
  c.intermediate_size = args.integer("--intermediate", c.intermediate_size, positive);
  c.vocab_size = args.integer("--vocab", c.vocab_size, Range::at_least(2).and_at_most(1 << 24));
  o.device = args.choice("--device", {"cpu", "cuda"}, o.device);
  o.dtype = odc::parse_dtype(args.choice("--dtype", {"float32", "bfloat16"}, "float32"));
  o.threads = static_cast<int>(args.integer("--threads", o.threads, Range::at_least(1).and_at_most(1024)));
  o.concurrency = args.integer_list("--concurrency", o.concurrency, positive);
  o.new_tokens = args.integer("--new-tokens", o.new_tokens, positive);
  o.prompt = args.integer("--prompt", o.prompt, Range::at_least(2).and_at_most(1 << 20));
  o.temperature = args.number("--temperature", o.temperature, Range::at_least(0));
  o.top_k = args.integer("--top-k", o.top_k, Range::at_least(0));
  o.reps = static_cast<int>(args.integer("--reps", o.reps, positive));
  const std::string paths = args.choice("--paths", {"both", "batched", "per_sequence"}, "both");
  if (paths != "both") o.paths = {paths};
  c.max_position_embeddings = o.prompt * 3 / 2 + o.new_tokens;
  c.validate("command line");
  return o;
}

std::string shape_text(const odc::model::LlamaConfig& c) {
  return "L" + std::to_string(c.num_hidden_layers) + " d" + std::to_string(c.hidden_size) + " ff" +
         std::to_string(c.intermediate_size) + " h" + std::to_string(c.num_attention_heads) + "/" +
         std::to_string(c.num_key_value_heads) + "x" + std::to_string(c.head_dim) + " v" +
         std::to_string(c.vocab_size) + (c.tie_word_embeddings ? " tied" : " untied");
}

std::vector<std::vector<std::int32_t>> prompts_for(std::int64_t count, const Options& o) {
  odc::SplitMix64 rng(11);
  std::vector<std::vector<std::int32_t>> prompts;
  for (std::int64_t p = 0; p < count; ++p) {
    const std::int64_t length =
        o.prompt / 2 + static_cast<std::int64_t>(rng.next() % static_cast<std::uint64_t>(o.prompt + 1));
    std::vector<std::int32_t> ids(static_cast<std::size_t>(length));
    for (auto& id : ids) id = static_cast<std::int32_t>(rng.next() % static_cast<std::uint64_t>(o.config.vocab_size));
    prompts.push_back(std::move(ids));
  }
  return prompts;
}

using Clock = std::chrono::steady_clock;

// The weights, timing the model's forwards: each starts at the embedding's acquire (unit 0) and
// ends at its last release (the head's, or the tied embedding's, after the logits' download).
class TimedParams final : public odc::model::ParamSource {
 public:
  explicit TimedParams(odc::bench::ResidentWeights& weights) : weights_(weights) {}
  const float* acquire(int unit) override {
    if (unit == 0) {
      close();
      start_ = Clock::now();
      open_ = true;
    }
    return weights_.acquire(unit);
  }
  void release(int unit) override {
    weights_.release(unit);
    last_ = Clock::now();
  }
  void prefetch(int unit) override { weights_.prefetch(unit); }
  // Seconds inside forwards since the last call.
  double take_seconds() {
    close();
    return std::exchange(seconds_, 0.0);
  }

 private:
  void close() {
    if (open_) seconds_ += std::chrono::duration<double>(last_ - start_).count();
    open_ = false;
  }
  odc::bench::ResidentWeights& weights_;
  Clock::time_point start_, last_;
  bool open_ = false;
  double seconds_ = 0.0;
};

struct Timed {
  double seconds = std::numeric_limits<double>::infinity();
  double model_seconds = 0.0;
  std::vector<odc::train::SampledCompletion> completions;
};

// One sample_rollouts of `prompts`, timed.
Timed time_rollouts(odc::model::LlamaModel& model, TimedParams& params, const Options& o,
                    const std::vector<std::vector<std::int32_t>>& prompts, std::int64_t new_tokens) {
  odc::train::RolloutOptions options;
  options.sampling.max_new_tokens = new_tokens;
  options.sampling.temperature = o.temperature;
  options.sampling.top_k = o.top_k;
  options.sampling.seed = 3;
  options.group_size = 1;
  options.concurrency = static_cast<std::int64_t>(prompts.size());
  Timed t;
  params.take_seconds();
  const auto start = Clock::now();
  t.completions = odc::train::sample_rollouts(model, params, prompts, options);
  t.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  t.model_seconds = params.take_seconds();
  for (const auto& c : t.completions) {
    if (static_cast<std::int64_t>(c.ids.size()) != new_tokens) {
      odc::fail("a completion has {} tokens instead of {}", c.ids.size(), new_tokens);
    }
  }
  return t;
}

int run(const Options& o) {
  std::unique_ptr<odc::backend::Backend> backend;
  if (o.device == "cuda") {
    try {
      if (!odc::backend::cuda_backend_built()) odc::fail("this build has no CUDA backend");
      backend = odc::backend::make_backend("cuda", odc::DType::bf16, 1);
    } catch (const odc::Error& e) {
      std::fprintf(stderr, "SKIP: no CUDA backend (%s)\n", e.what());
      return 77;
    }
  } else {
    backend = odc::backend::make_backend("cpu", o.dtype, o.threads);
  }
  const std::string device_name(backend->name());
  odc::model::LlamaModel model(o.config, std::move(backend));
  odc::bench::ResidentWeights weights(model.backend(), model.units(), odc::bench::tiled_weights(model));
  TimedParams params(weights);
  odc::backend::Backend& b = model.backend();
  b.keep_weight_copies(true);
  const std::vector<std::string>& paths = o.paths;
  for (const auto& path : paths) {  // warm-up: first allocations, kernel set-up, page faults
    b.set_per_sequence_decode(path == "per_sequence");
    time_rollouts(model, params, o, prompts_for(4, o), 2);
  }
  for (const std::int64_t concurrency : o.concurrency) {
    const auto prompts = prompts_for(concurrency, o);
    // The paths take turns rep by rep, so that a slow spell of the machine is shared out.
    std::vector<Timed> runs(paths.size());
    for (int rep = 0; rep < o.reps; ++rep) {
      for (std::size_t p = 0; p < paths.size(); ++p) {
        b.set_per_sequence_decode(paths[p] == "per_sequence");
        Timed t = time_rollouts(model, params, o, prompts, o.new_tokens);
        if (t.seconds < runs[p].seconds) runs[p] = std::move(t);
      }
    }
    std::vector<nlohmann::json> lines;
    for (std::size_t p = 0; p < paths.size(); ++p) {
      const double tokens = static_cast<double>(concurrency * o.new_tokens);
      lines.push_back({{"bench", "rollout_throughput"},
                       {"path", paths[p]},
                       {"concurrency", concurrency},
                       {"new_tokens", o.new_tokens},
                       {"prompt_tokens", o.prompt},
                       {"tokens", concurrency * o.new_tokens},
                       {"seconds", runs[p].seconds},
                       {"tokens_per_s", tokens / runs[p].seconds},
                       {"model_s", runs[p].model_seconds},
                       {"temperature", o.temperature},
                       {"top_k", o.top_k},
                       {"reps", o.reps},
                       {"device", device_name},
                       {"threads", o.device == "cpu" ? o.threads : 0},
                       {"shape", o.shape},
                       {"dims", shape_text(o.config)}});
    }
    if (paths.size() == 2) {
      for (std::size_t i = 0; i < runs[0].completions.size(); ++i) {
        if (runs[0].completions[i].ids != runs[1].completions[i].ids) {
          odc::fail("concurrency {}: completion {} differs between the per-sequence and the batched path", concurrency,
                    i);
        }
      }
      const double ratio = runs[0].seconds / runs[1].seconds;  // batched tokens/s over per-sequence tokens/s
      for (auto& line : lines) {
        line["batched_over_per_sequence"] = ratio;
        line["model_batched_over_per_sequence"] = runs[0].model_seconds / runs[1].model_seconds;
        line["same_completions"] = true;
      }
    }
    for (const auto& line : lines) std::printf("%s\n", line.dump().c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return odc::cli::run_tool("rollout_throughput", [&] { return run(parse(argc, argv)); });
}
