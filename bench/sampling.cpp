// sampling_bench: host time per sampled token (TokenSampler::next: softmax, top-k / top-p, the draw)
// over a vocabulary the size of Qwen2's (152064), beside a full sort of the vocabulary per token (the
// sampler's earlier way, kept here as the baseline), in one run. Logits are normal with a given
// spread (the baseline: bench/support/full_sort_sampler.h): 3 gives a nucleus of tens to hundreds of tokens at top-p 0.9, 0.5 one of tens of thousands.
// One JSON line per setting:
//   {"bench":"sampling","vocab":152064,"temperature":0.8,"top_p":0.9,"top_k":0,"logit_spread":3,
//    "ms_per_token":..,"full_sort_ms_per_token":..,"speedup":..}
// "ms" are medians over the tokens.
//
//   sampling_bench [--vocab N] [--tokens N] [--seed N]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <vector>

#include "cli/command_line.h"
#include "cli/tool_main.h"
#include "odc/train/rollout/sampling.h"
#include "support/full_sort_sampler.h"
#include "support/median.h"

namespace {

using Clock = std::chrono::steady_clock;

using odc::bench::median;

int run(int argc, char** argv) {
  const odc::cli::Command command{"sampling_bench",
                                  "usage: sampling_bench [--vocab N] [--tokens N] [--seed N]\n"
                                  "Host time per sampled token, the sampler beside a full sort of the vocabulary;\n"
                                  "one JSON line per setting.\n",
                                  {{"--vocab"}, {"--tokens"}, {"--seed"}}};
  const auto args = odc::cli::parse(command, argc, argv);
  const auto vocab = args.integer<std::int64_t>("--vocab", 152064);
  const auto tokens = args.integer<int>("--tokens", 60);
  const auto seed = args.integer<std::uint64_t>("--seed", 1);
  struct Setting {
    double top_p;
    std::int64_t top_k;
    double spread;
  };
  const Setting settings[] = {{1.0, 0, 3.0}, {0.9, 0, 3.0}, {0.95, 0, 3.0}, {1.0, 50, 3.0}, {0.9, 0, 0.5}};
  std::mt19937_64 make(seed);
  std::vector<double> probs(static_cast<std::size_t>(vocab));
  std::vector<std::int32_t> order(static_cast<std::size_t>(vocab));
  for (const auto& setting : settings) {
    std::vector<float> logits(static_cast<std::size_t>(vocab));
    std::normal_distribution<double> normal(0.0, setting.spread);
    odc::train::GenerateOptions o;
    o.temperature = 0.8;
    o.top_p = setting.top_p;
    o.top_k = setting.top_k;
    o.seed = seed;
    odc::train::TokenSampler sampler(o, vocab);
    std::mt19937_64 rng(seed);
    std::vector<double> ours, baseline;
    std::int64_t checksum = 0;
    for (int t = 0; t < tokens; ++t) {
      for (auto& l : logits) l = static_cast<float>(normal(make));
      std::vector<float> copy = logits;
      auto start = Clock::now();
      checksum += sampler.next(copy);
      ours.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
      start = Clock::now();
      checksum += odc::bench::full_sort_draw(logits, o, probs, order, rng);
      baseline.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    }
    const double ms = median(ours);
    const double full = median(baseline);
    const nlohmann::json line = {{"bench", "sampling"},
                                 {"vocab", vocab},
                                 {"temperature", o.temperature},
                                 {"top_p", setting.top_p},
                                 {"top_k", setting.top_k},
                                 {"logit_spread", setting.spread},
                                 {"ms_per_token", std::round(ms * 1000.0) / 1000.0},
                                 {"full_sort_ms_per_token", std::round(full * 1000.0) / 1000.0},
                                 {"speedup", std::round(full / ms * 100.0) / 100.0},
                                 {"checksum", checksum}};
    std::printf("%s\n", line.dump().c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return odc::cli::run_tool("sampling_bench", [&] { return run(argc, argv); });
}
