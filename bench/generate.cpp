// generate_bench: time per new token of train::generate (greedy, what odc-generate runs) with the
// KV cache and without it (--no-cache: the whole sequence rerun for every token), on a random
// model written as a Hugging Face checkpoint into a temporary directory and loaded like any other.
//
//   generate_bench --layers 4 --hidden 128 --heads 4 --kv-heads 2 --intermediate 344 --vocab 1024
//                  --prompt 16 --new 64,128,256,512 --threads 1 --reps 3
//
// One JSON line per measurement: {"bench": "generate", "cache": bool, "new_tokens": N,
// "prompt_tokens": P, "seconds": best of reps for the whole generation, "ms_per_token":
// seconds / N * 1e3, model shape, threads}. With the cache the time per token should stay about
// flat in N (one token through the layers plus attention over the cache, which is small next to
// the GEMMs at these lengths); without it, it grows linearly (each token reruns the sequence).
// The prompt's prefill is part of the time (as in odc-generate); the model has no eos id, so
// every run generates exactly N tokens. A 16-token generation per mode warms up first.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/command_line.h"
#include "cli/tool_main.h"

#include "odc/core/error.h"
#include "odc/io/hf_checkpoint.h"
#include "odc/model/llama_config.h"
#include "odc/model/units.h"
#include "odc/train/rollout/inference.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int layers = 4;
  std::int64_t hidden = 128;
  int heads = 4;
  int kv_heads = 2;
  std::int64_t intermediate = 344;
  std::int64_t vocab = 1024;
  std::int64_t prompt = 16;
  std::vector<std::int64_t> new_tokens = {64, 128, 256, 512};
  int threads = 1;
  int reps = 3;
  bool no_cache = true;  // also time the run without the cache
  std::uint64_t seed = 0;
};

constexpr const char* kUsage =
    "usage: generate_bench [--layers N] [--hidden N] [--heads N] [--kv-heads N] [--intermediate N]\n"
    "                      [--vocab N] [--prompt N] [--new N1,N2,...] [--threads N] [--reps N]\n"
    "                      [--cache-only 1] [--seed N]\n"
    "Times greedy generation of N new tokens with and without the KV cache; one JSON line per\n"
    "measurement, with ms_per_token.\n";

Options parse_options(int argc, char** argv) {
  using odc::Range;
  const odc::cli::Command command{"generate_bench", kUsage,
                                  {{"--layers"}, {"--hidden"}, {"--heads"}, {"--kv-heads"}, {"--intermediate"},
                                   {"--vocab"}, {"--prompt"}, {"--new"}, {"--threads"}, {"--reps"},
                                   {"--cache-only"}, {"--seed"}}};
  const auto args = odc::cli::parse(command, argc, argv);
  Options o;
  o.layers = static_cast<int>(args.integer("--layers", o.layers, Range::at_least(1).and_at_most(1 << 16)));
  o.hidden = args.integer("--hidden", o.hidden, Range::at_least(1));
  o.heads = static_cast<int>(args.integer("--heads", o.heads, Range::at_least(1).and_at_most(1 << 16)));
  o.kv_heads = static_cast<int>(args.integer("--kv-heads", o.kv_heads, Range::at_least(1).and_at_most(1 << 16)));
  o.intermediate = args.integer("--intermediate", o.intermediate, Range::at_least(1));
  o.vocab = args.integer("--vocab", o.vocab, Range::at_least(1));
  o.prompt = args.integer("--prompt", o.prompt, Range::at_least(1));
  o.new_tokens = args.integer_list("--new", o.new_tokens, Range::at_least(1));
  o.threads = static_cast<int>(args.integer("--threads", o.threads, Range::at_least(1).and_at_most(1024)));
  o.reps = static_cast<int>(args.integer("--reps", o.reps, Range::at_least(1).and_at_most(1 << 20)));
  o.no_cache = args.integer("--cache-only", 0, Range::at_least(0).and_at_most(1)) == 0;
  o.seed = args.integer<std::uint64_t>("--seed", 0);
  return o;
}

int run(const Options& o) {
  const std::int64_t longest = *std::max_element(o.new_tokens.begin(), o.new_tokens.end());
  nlohmann::json hf = {{"vocab_size", o.vocab},
                       {"hidden_size", o.hidden},
                       {"intermediate_size", o.intermediate},
                       {"num_hidden_layers", o.layers},
                       {"num_attention_heads", o.heads},
                       {"num_key_value_heads", o.kv_heads},
                       {"max_position_embeddings", o.prompt + longest}};
  const auto config = odc::model::LlamaConfig::from_json(hf, "command line", true);
  config.validate("command line");
  const auto dir = std::filesystem::temp_directory_path() / ("odc_generate_bench_" + std::to_string(::getpid()));
  const auto units = odc::model::build_unit_layouts(config);
  odc::io::write_hf_checkpoint(dir.string(), config, "LlamaForCausalLM", odc::DType::f32, [&](int unit, float* out) {
    const auto& layout = units[static_cast<std::size_t>(unit)];
    odc::model::init_unit_range(layout, config, o.seed, 0, layout.numel, out);
  });
  struct Cleanup {
    std::filesystem::path path;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  } cleanup{dir};
  odc::train::LoadedModel model(dir.string(), o.threads);

  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<std::int32_t> token(0, static_cast<std::int32_t>(o.vocab - 1));
  std::vector<std::int32_t> prompt(static_cast<std::size_t>(o.prompt));
  for (auto& id : prompt) id = token(rng);

  for (const bool cache : {true, false}) {
    if (!cache && !o.no_cache) continue;
    {  // Warm-up: first allocations, the GEMM library's kernel set-up, page faults.
      odc::train::GenerateOptions warm;
      warm.max_new_tokens = 16;
      warm.use_cache = cache;
      odc::train::generate(model, prompt, warm);
    }
    for (const std::int64_t n : o.new_tokens) {
      odc::train::GenerateOptions options;
      options.max_new_tokens = n;
      options.use_cache = cache;
      double best = std::numeric_limits<double>::infinity();
      std::size_t generated = 0;
      for (int rep = 0; rep < o.reps; ++rep) {
        const auto start = Clock::now();
        generated = odc::train::generate(model, prompt, options).ids.size();
        best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
      }
      if (generated != static_cast<std::size_t>(n)) odc::fail("generated {} tokens instead of {}", generated, n);
      const nlohmann::json line = {{"bench", "generate"},
                                   {"cache", cache},
                                   {"new_tokens", n},
                                   {"prompt_tokens", o.prompt},
                                   {"seconds", best},
                                   {"ms_per_token", best / static_cast<double>(n) * 1e3},
                                   {"reps", o.reps},
                                   {"threads", o.threads},
                                   {"model", hf}};
      std::printf("%s\n", line.dump().c_str());
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return odc::cli::run_tool("generate_bench", [&] { return run(parse_options(argc, argv)); });
}
