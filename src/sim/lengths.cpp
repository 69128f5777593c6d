#include "odc/sim/lengths.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>

#include <fmt/format.h>

#include "odc/core/error.h"
#include "odc/core/random.h"
#include "odc/core/text.h"
#include "odc/data/dataset.h"

namespace odc::sim {

namespace {

// Standard normal of sequence `index`: counter-based, so a sequence's length does not depend on
// how many are drawn.
double normal_at(std::uint64_t seed, std::int64_t index) {
  const std::uint64_t stream = splitmix64(substream_seed(seed, static_cast<std::uint64_t>(index)));
  return normal_from_bits(splitmix64(stream), splitmix64(stream ^ 0x5851F42D4C957F2DULL));
}

}  // namespace

std::vector<std::int64_t> read_length_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("data.lengths: cannot open '{}'", path);
  std::vector<std::int64_t> lengths;
  std::string line;
  std::int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    const auto comment = line.find('#');
    const std::string text = trim(std::string_view(line).substr(0, comment), " \t\r");
    if (text.empty()) continue;
    std::int64_t value = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc() || end != text.data() + text.size() || value < 1) {
      fail("{}:{}: expected one positive integer sequence length per line, found '{}'", path, number, text);
    }
    lengths.push_back(value);
  }
  if (lengths.empty()) fail("{}: no sequence lengths found (one positive integer per line, '#' comments)", path);
  return lengths;
}

std::vector<std::int64_t> lognormal_lengths(double mean_length, double sigma, std::int64_t min_length,
                                            std::int64_t max_length, std::int64_t count, std::uint64_t seed) {
  if (!(mean_length >= 1.0) || !std::isfinite(mean_length)) fail("data.mean_length must be >= 1, found {}", mean_length);
  if (!(sigma >= 0.0) || !std::isfinite(sigma)) fail("data.sigma must be >= 0, found {}", sigma);
  if (min_length < 1) fail("data.min_length must be >= 1, found {}", min_length);
  if (max_length < min_length) {
    fail("data.max_length ({}) must be >= data.min_length ({}) for the synthetic distribution", max_length, min_length);
  }
  if (count < 1) fail("the synthetic length pool must hold at least 1 sequence, found {}", count);
  // mu such that the mean of the unclipped log-normal is mean_length (as odc-data synth does).
  const double mu = std::log(mean_length) - 0.5 * sigma * sigma;
  std::vector<std::int64_t> out;
  out.reserve(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) {
    const double drawn = std::exp(mu + sigma * normal_at(seed, i));
    // Clip in floating point first: exp() may overflow any integer type.
    const double clipped = std::clamp(drawn, static_cast<double>(min_length), static_cast<double>(max_length));
    out.push_back(static_cast<std::int64_t>(std::llround(clipped)));
  }
  return out;
}

LengthPool load_lengths(const LengthSource& source) {
  LengthPool pool;
  if (source.path.empty()) {
    pool.lengths = lognormal_lengths(source.mean_length, source.sigma, source.min_length, source.max_length,
                                     source.count, source.seed);
    pool.description = fmt::format("synthetic lognormal(mean {}, sigma {}) clipped to [{}, {}], {} sequences",
                                   source.mean_length, source.sigma, source.min_length, source.max_length, source.count);
    return pool;
  }
  if (source.max_length < 0) fail("data.max_length must be >= 0, found {}", source.max_length);
  if (source.format == "lengths") {
    pool.lengths = read_length_file(source.path);
    pool.description = fmt::format("{} ({} lengths)", source.path, pool.lengths.size());
  } else if (source.format == "tokens" || source.format == "bin") {
    const auto dataset = data::open_dataset(source.path, source.format, source.vocab_size);
    for (std::int64_t i = 0; i < dataset->size(); ++i) pool.lengths.push_back(dataset->length(i));
    if (pool.lengths.empty()) fail("{}: the dataset holds no sequences", dataset->describe());
    pool.description = dataset->describe();
  } else {
    fail("data.format must be text, tokens or bin, found '{}'", source.format);
  }
  if (source.max_length > 0) {
    for (auto& length : pool.lengths) {
      if (length > source.max_length) {
        length = source.max_length;
        ++pool.truncated;
      }
    }
    if (pool.truncated > 0) {
      pool.description += fmt::format(", {} truncated to {} tokens", pool.truncated, source.max_length);
    }
  }
  return pool;
}

}  // namespace odc::sim
