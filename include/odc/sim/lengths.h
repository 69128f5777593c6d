#pragma once
// Where the simulator's sequence lengths come from: a text file of lengths (the user's real
// distribution), a dataset odc-train reads (format tokens or bin: its sequence lengths), or a
// synthetic log-normal distribution limited to [min_length, max_length].
//
// A sequence outside the limits is dropped (the default, as a dataset filter does: the reference
// implementation keeps only sequences within the maximum length) or truncated to the limit. For
// the synthetic distribution dropping means drawing from the log-normal truncated to the limits
// (no mass piles up at a cap); truncating clips every draw into them.
#include <cstdint>
#include <string>
#include <vector>

namespace odc::sim {

enum class OverLimit : std::uint8_t { drop, truncate };
OverLimit parse_over_limit(const std::string& name);  // "drop" | "truncate", else odc::Error naming data.over_length

struct LengthSource {
  std::string path;                  // "" = synthetic
  std::string format = "lengths";    // lengths (one per line) | tokens | bin
  std::int64_t vocab_size = 0;       // token ids of a dataset must lie below it
  bool ignore_extra_fields = false;  // data.extra_fields: ignore (unknown fields of a tokens record)
  // Synthetic log-normal: `mean_length` is the mean of the untruncated distribution (as in
  // odc-data synth), `sigma` its log-space standard deviation.
  double mean_length = 16384.0;
  double sigma = 1.0;
  std::int64_t min_length = 128;     // synthetic only
  std::int64_t max_length = 65536;   // 0 = no limit (files and datasets only)
  OverLimit over_limit = OverLimit::drop;
  std::int64_t count = 1000;         // synthetic pool size
  std::uint64_t seed = 0;
};

// Summary statistics of a pool, printed next to the published ones of the dataset it stands in for.
struct LengthStats {
  std::int64_t count = 0;
  double mean = 0.0;
  double median = 0.0;
  double p95 = 0.0;
  std::int64_t shortest = 0;
  std::int64_t longest = 0;
  double share_at_longest = 0.0;  // fraction of sequences exactly at the longest length (a clipping spike)
  std::string text() const;       // "mean 16.5K, median 13.4K, p95 35.0K, max 64.0K (0.0% at max), 10000 sequences"
};
LengthStats length_stats(const std::vector<std::int64_t>& lengths);

struct LengthPool {
  std::vector<std::int64_t> lengths;
  std::string description;       // e.g. "lognormal(mean 16384, sigma 1) truncated to [8192, 65536], 800 sequences"
  std::int64_t truncated = 0;    // lengths cut to max_length (files and datasets, over_limit truncate)
  std::int64_t dropped = 0;      // lengths removed for exceeding max_length (files and datasets, over_limit drop)
};

// Reads "one positive integer per line"; '#' starts a comment, blank lines are skipped. Errors
// name "path:line" and the offending text.
std::vector<std::int64_t> read_length_file(const std::string& path);

// Deterministic in (seed, index): sequence i does not depend on how many are drawn. Sequence i is
// the same quantile of the distribution whatever the limits, so a maximum-length sweep changes
// lengths monotonically. drop: the log-normal truncated to [min_length, max_length] (inverse CDF);
// truncate: every draw clipped into it.
std::vector<std::int64_t> lognormal_lengths(double mean_length, double sigma, std::int64_t min_length,
                                            std::int64_t max_length, std::int64_t count, std::uint64_t seed,
                                            OverLimit over_limit = OverLimit::truncate);

LengthPool load_lengths(const LengthSource& source);

}  // namespace odc::sim
