#include "odc/train/performance.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include <fmt/format.h>

#include "odc/kernels/matmul.h"

namespace odc::train {

double measure_cpu_peak_flops() {
  constexpr std::int64_t n = 1024;
  std::vector<float> a(static_cast<std::size_t>(n * n), 0.5f), b(a.size(), 0.25f), c(a.size(), 0.0f);
  double best = 0.0;
  // The first product warms caches and BLAS's thread pool; the best of the rest is the peak.
  for (int i = 0; i < 10; ++i) {
    const auto start = std::chrono::steady_clock::now();
    kernels::cpu::gemm<float>(false, true, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (i > 0 && seconds > 0) best = std::max(best, 2.0 * n * n * n / seconds);
  }
  return best;
}

std::string format_rank_table(const std::vector<RankTotals>& ranks) {
  std::string out = fmt::format("{:>6} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9} {:>8}\n", "rank", "microbat.",
                                "compute s", "gather s", "push s", "barrier s", "optim. s", "busy %", "GFLOP/s");
  RankTotals total;
  auto row = [&](const std::string& label, const RankTotals& r) {
    const double minibatch = r.compute_s + r.gather_s + r.push_s + r.barrier_s;
    out += fmt::format("{:>6} {:>9.0f} {:>10.2f} {:>10.2f} {:>10.2f} {:>10.2f} {:>10.2f} {:>8.1f}% {:>8.2f}\n", label,
                       r.microbatches, r.compute_s, r.gather_s, r.push_s, r.barrier_s, r.optimizer_s,
                       minibatch > 0 ? 100.0 * r.compute_s / minibatch : 0.0,
                       r.compute_s > 0 ? r.flops / r.compute_s / 1e9 : 0.0);
  };
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    row(std::to_string(i), ranks[i]);
    total.compute_s += ranks[i].compute_s;
    total.gather_s += ranks[i].gather_s;
    total.push_s += ranks[i].push_s;
    total.barrier_s += ranks[i].barrier_s;
    total.optimizer_s += ranks[i].optimizer_s;
    total.microbatches += ranks[i].microbatches;
    total.tokens += ranks[i].tokens;
    total.flops += ranks[i].flops;
  }
  if (ranks.size() > 1) row("all", total);
  return out;
}

}  // namespace odc::train
