// planner_bench: how long make_plan takes for LB-Micro and LB-Mini over global minibatches of 256
// to 16384 sequences and 8 to 1024 ranks, with LongAlign-like lengths (log-normal, mean about a
// quarter of the 64K maximum, long tail, clipped to [64, 65536]; cap 65536) and the reference's
// fitted 7B quadratic cost. Prints one JSON line per cell, with the planned bubble rates:
//   {"bench":"planner","balance":"lb_mini","sequences":4096,"ranks":64,"ms":..,
//    "bubble_odc":..,"bubble_collective":..}
// "ms" is the median over several runs (at least 3, more while a cell stays under ~1.5 s).
//
//   planner_bench [--seed N] [--sequences N] [--per-microbatch C] [--max-ms MS]
// --sequences: only the cells of that minibatch size; --per-microbatch: the cost model's fixed cost
// per microbatch (the 7B fit's is 0.951; default 0); --max-ms: exit 1 naming every cell whose
// median exceeds it (the planners' budget per step: a bench to run on an idle machine, not a test).
#include "odc/data/planner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <nlohmann/json.hpp>
#include <numbers>
#include <string>
#include <vector>

#include "cli/command_line.h"
#include "cli/tool_main.h"
#include "support/median.h"
#include "odc/core/error.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::int64_t kMaxLength = 65536;
constexpr std::int64_t kMinLength = 64;

// splitmix64: a self-contained generator, so the lengths are the same on every platform.
struct Rng {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }
  double normal() {  // Box-Muller
    return std::sqrt(-2.0 * std::log(uniform())) * std::cos(2.0 * std::numbers::pi * uniform());
  }
};

// Log-normal with sigma 1 and an unclipped mean of 16K (a quarter of the maximum); clipping the
// tail at 64K brings the mean to about 14.5K, near LongAlign's ~16.5K with the same 64K maximum.
std::vector<std::int64_t> longalign_like(std::size_t count, Rng& rng) {
  const double sigma = 1.0;
  const double mu = std::log(static_cast<double>(kMaxLength) / 4.0) - sigma * sigma / 2.0;
  std::vector<std::int64_t> lengths(count);
  for (auto& length : lengths) {
    const double drawn = std::exp(mu + sigma * rng.normal());
    length = std::clamp(static_cast<std::int64_t>(std::llround(drawn)), kMinLength, kMaxLength);
  }
  return lengths;
}

using odc::bench::median;

int run(int argc, char** argv) {
  const odc::cli::Command command{"planner_bench",
                                  "usage: planner_bench [--seed N] [--sequences N] [--per-microbatch C] [--max-ms MS]\n"
                                  "Times make_plan (lb_micro, lb_mini) over 256..16384 sequences x 8..1024 ranks;\n"
                                  "one JSON line per cell; --max-ms: exit 1 if a cell's median exceeds it.\n",
                                  {{"--seed"}, {"--sequences"}, {"--per-microbatch"}, {"--max-ms"}}};
  const auto args = odc::cli::parse(command, argc, argv);
  const auto seed = args.integer<std::uint64_t>("--seed", 1);
  const auto only = args.integer<std::size_t>("--sequences", 0);
  const double per_microbatch = args.number("--per-microbatch", 0.0);
  const double max_ms = args.number("--max-ms", 0.0);
  std::vector<std::string> over;
  // The reference's fit for a 7B model, cost = 4.348357 s'^2 + 8.768377 s' with s' = s / 32000.
  auto cost = odc::data::CostModel::quadratic(4.348357 / (32000.0 * 32000.0), 8.768377 / 32000.0);
  cost.per_microbatch = per_microbatch;
  for (const std::size_t sequences : {256u, 1024u, 4096u, 16384u}) {
    if (only != 0 && sequences != only) continue;
    for (const int ranks : {8, 64, 256, 1024}) {
      if (sequences < static_cast<std::size_t>(ranks)) continue;
      Rng rng{seed * 0x100000001B3ULL + sequences * 131 + static_cast<std::uint64_t>(ranks)};
      odc::data::PlanInput input;
      input.lengths = longalign_like(sequences, rng);
      input.world_size = ranks;
      input.token_cap = kMaxLength;
      input.cost = cost;
      for (const auto balance : {odc::data::Balance::lb_micro, odc::data::Balance::lb_mini}) {
        input.balance = balance;
        std::vector<double> times;
        double spent = 0.0;
        odc::data::Plan plan;
        while (times.size() < 3 || (times.size() < 9 && spent < 1.5)) {
          const auto start = Clock::now();
          plan = odc::data::make_plan(input);
          const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
          times.push_back(seconds * 1e3);
          spent += seconds;
        }
        const nlohmann::json line = {{"bench", "planner"},
                                     {"balance", odc::data::balance_name(balance)},
                                     {"sequences", sequences},
                                     {"ranks", ranks},
                                     {"ms", std::round(median(times) * 1000.0) / 1000.0},
                                     {"bubble_odc", plan.bubble_odc()},
                                     {"bubble_collective", plan.bubble_collective()},
                                     {"max_microbatches", plan.max_microbatches()}};
        std::printf("%s\n", line.dump().c_str());
        std::fflush(stdout);
        if (max_ms > 0.0 && median(times) > max_ms) {
          over.push_back(odc::data::balance_name(balance) + " " + std::to_string(sequences) + " x " +
                         std::to_string(ranks));
        }
      }
    }
  }
  for (const auto& cell : over) std::fprintf(stderr, "planner_bench: %s took longer than --max-ms %g\n", cell.c_str(), max_ms);
  return over.empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return odc::cli::run_tool("planner_bench", [&] { return run(argc, argv); });
}
