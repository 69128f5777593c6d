#pragma once
// Throughput accounting: the peak MFU is measured against, and the end-of-run summary.
#include <cstdint>
#include <string>
#include <vector>

namespace odc::train {

// Peak FLOP/s of one rank on the CPU: the best of several 1024^3 sgemms through the BLAS the
// kernels use, with the current thread count (about 0.2 s; the best, since other processes on
// the machine only ever make a run slower). MFU against it says how much of what
// this machine's BLAS can do the training reaches, which is the honest CPU analogue of a GPU's
// datasheet peak (named devices: odc/core/device_specs.h).
double measure_cpu_peak_flops();

// One rank's totals over a run, for the summary table.
struct RankTotals {
  double compute_s = 0.0;   // minibatch time not spent waiting
  double gather_s = 0.0;
  double push_s = 0.0;
  double barrier_s = 0.0;
  double optimizer_s = 0.0;
  double microbatches = 0.0;
  double tokens = 0.0;
  double flops = 0.0;
};

// The summary table rank 0 prints at the end: one row per rank and a total row.
std::string format_rank_table(const std::vector<RankTotals>& ranks);

}  // namespace odc::train
