#pragma once
// The CPU's MFU denominator made stable: the best FMA peak ever measured on this CPU model at this
// thread count, kept in a small JSON file and only ever raised.
//
// Why a cache of measurements and not a derivation from the ISA and the clock: one start-up
// measurement moves with whatever else the machine runs (62, 74 and 154-226 GFLOP/s minutes apart
// on a shared 2-core VM: a measurement can only lose time, never gain it), while a derivation
// (lanes x 2 FLOPs x FMA units x clock) needs two numbers a program cannot read reliably: the
// number of FMA units per core (cpuid does not say; Xeon SKUs differ) and the clock under turbo
// (/proc/cpuinfo "cpu MHz" is the base clock in a VM, below what the cores run at, so a derived
// peak would sit under the measured one). The best of N measurements rises toward the true peak,
// and two runs one after the other on one machine divide by the same number once it has settled
// (the start-up log says when a run raised it). The derivation survives as a plausibility ceiling
// (plausible_peak_ceiling): a cached or measured value above it is not believed.
#include <cstdint>
#include <string>
#include <string_view>

#include "odc/core/cpu_features.h"

namespace odc {

struct CachedPeak {
  double flops = 0.0;             // the peak to divide by: max(the cached best, this measurement)
  double measured = 0.0;          // this measurement
  double previous = 0.0;          // the cached best before this measurement (0: there was none)
  std::int64_t measurements = 0;  // the measurements the best is over, this one included
  std::string file;               // the cache file; "" when no cache was used
  // For the start-up log: "best of 4 measurements (/root/.cache/odc/cpu-peak.json; this run
  // measured 170.2 GFLOP/s)", "... raised from 160.1 GFLOP/s by this run", or "this measurement
  // alone (no peak cache)".
  std::string describe() const;
};

// The cache file: $ODC_PEAK_CACHE when set ("off" or "": no cache), else
// $XDG_CACHE_HOME/odc/cpu-peak.json, else $HOME/.cache/odc/cpu-peak.json; "" without a home.
std::string peak_cache_path();

// The entry a peak is kept under: the CPU (name, family, model), the FMA loop and its dtype, and
// the thread count: "Intel(R) Xeon(R) Processor (family 6 model 207) | avx512f fp32 | 1 thread".
std::string peak_cache_key(const CpuFeatures& cpu, int threads);

// An upper bound no core reaches: lanes x 2 FLOPs x 2 FMA units x 6 GHz x threads (sse: 4 lanes,
// scalar: 1). A measurement or a cached value above it is a broken timer or an edited file.
double plausible_peak_ceiling(std::string_view fma_path, int threads);

// Folds `measured` into the entry `key` of the cache `file` (created with its directory when
// missing) under an exclusive lock, so ranks that start together on one host do not lose each
// other's updates, and returns the entry after the update. Never throws for the cache's sake: a
// file that is not valid JSON, or an entry that is not a positive finite number of FLOP/s up to
// `ceiling`, is ignored with a warning naming the file and rewritten; a file that cannot be read,
// locked or written gives a warning and `measured` alone. `file` "": `measured` alone, silently.
// A `measured` above `ceiling` is returned but not cached.
CachedPeak fold_peak_into_cache(const std::string& file, const std::string& key, double measured, double ceiling);

// The CPU backend's MFU denominator: measure_fma_peak_flops(threads) folded into
// peak_cache_path() under peak_cache_key(detect_cpu_features(), threads).
CachedPeak cpu_peak_flops(int threads);

}  // namespace odc
