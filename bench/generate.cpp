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

#include "bench_args.h"

#include "odc/core/error.h"
#include "odc/io/hf_checkpoint.h"
#include "odc/model/llama_config.h"
#include "odc/model/units.h"
#include "odc/train/inference.h"

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

using odc::bench::parse_int;

Options parse_options(int argc, char** argv) {
  Options o;
  odc::bench::for_each_flag(argc, argv, kUsage, [&](const std::string& flag, const std::string& value) {
    if (flag == "--layers") o.layers = static_cast<int>(parse_int(flag, value));
    else if (flag == "--hidden") o.hidden = parse_int(flag, value);
    else if (flag == "--heads") o.heads = static_cast<int>(parse_int(flag, value));
    else if (flag == "--kv-heads") o.kv_heads = static_cast<int>(parse_int(flag, value));
    else if (flag == "--intermediate") o.intermediate = parse_int(flag, value);
    else if (flag == "--vocab") o.vocab = parse_int(flag, value);
    else if (flag == "--prompt") o.prompt = parse_int(flag, value);
    else if (flag == "--threads") o.threads = static_cast<int>(parse_int(flag, value));
    else if (flag == "--reps") o.reps = static_cast<int>(parse_int(flag, value));
    else if (flag == "--cache-only") o.no_cache = parse_int(flag, value) == 0;
    else if (flag == "--seed") o.seed = static_cast<std::uint64_t>(parse_int(flag, value));
    else if (flag == "--new") o.new_tokens = odc::bench::parse_int_list(flag, value);
    else return false;
    return true;
  });
  if (o.new_tokens.empty() || o.prompt < 1 || o.reps < 1 || o.threads < 1) {
    odc::fail("--new needs at least one count, --prompt, --reps and --threads at least 1");
  }
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
  try {
    return run(parse_options(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "generate_bench: error: %s\n", e.what());
    return 1;
  }
}
