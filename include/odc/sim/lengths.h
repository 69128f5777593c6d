#pragma once
// Where the simulator's sequence lengths come from: a text file of lengths (the user's real
// distribution), a dataset odc-train reads (format tokens or bin: its sequence lengths), or a
// synthetic log-normal distribution clipped to [min_length, max_length].
#include <cstdint>
#include <string>
#include <vector>

namespace odc::sim {

struct LengthSource {
  std::string path;                  // "" = synthetic
  std::string format = "lengths";    // lengths (one per line) | tokens | bin
  std::int64_t vocab_size = 0;       // token ids of a dataset must lie below it
  // Synthetic log-normal: `mean_length` is the mean of the unclipped distribution (as in
  // odc-data synth), `sigma` its log-space standard deviation.
  double mean_length = 16384.0;
  double sigma = 1.0;
  std::int64_t min_length = 128;
  std::int64_t max_length = 65536;   // synthetic: clip; files/datasets: truncate longer ones (0 = keep)
  std::int64_t count = 1000;         // synthetic pool size
  std::uint64_t seed = 0;
};

struct LengthPool {
  std::vector<std::int64_t> lengths;
  std::string description;       // e.g. "lognormal(mean 16384, sigma 1), 800 sequences"
  std::int64_t truncated = 0;    // lengths cut to max_length (files and datasets)
};

// Reads "one positive integer per line"; '#' starts a comment, blank lines are skipped. Errors
// name "path:line" and the offending text.
std::vector<std::int64_t> read_length_file(const std::string& path);

// Deterministic in (seed, index): sequence i does not depend on how many are drawn.
std::vector<std::int64_t> lognormal_lengths(double mean_length, double sigma, std::int64_t min_length,
                                            std::int64_t max_length, std::int64_t count, std::uint64_t seed);

LengthPool load_lengths(const LengthSource& source);

}  // namespace odc::sim
