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

double standard_normal_cdf(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }

// Bisection to double precision: monotone and exact enough for quantiles in (1e-300, 1 - 1e-16).
double inverse_standard_normal_cdf(double p) {
  double lo = -40.0;
  double hi = 40.0;
  for (int i = 0; i < 200 && hi - lo > 1e-12; ++i) {
    const double mid = 0.5 * (lo + hi);
    (standard_normal_cdf(mid) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
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

OverLimit parse_over_limit(const std::string& name) {
  if (name == "drop") return OverLimit::drop;
  if (name == "truncate") return OverLimit::truncate;
  fail("data.over_length must be drop or truncate, found '{}'", name);
}

std::string LengthStats::text() const {
  auto k = [](double tokens) { return fmt::format("{:.1f}K", tokens / 1000.0); };
  return fmt::format("mean {}, median {}, p95 {}, max {} ({:.1f}% at max), {} sequences", k(mean), k(median), k(p95),
                     k(static_cast<double>(longest)), 100.0 * share_at_longest, count);
}

LengthStats length_stats(const std::vector<std::int64_t>& lengths) {
  LengthStats stats;
  if (lengths.empty()) return stats;
  std::vector<std::int64_t> sorted = lengths;
  std::sort(sorted.begin(), sorted.end());
  const auto n = sorted.size();
  stats.count = static_cast<std::int64_t>(n);
  double sum = 0.0;
  for (const auto length : sorted) sum += static_cast<double>(length);
  stats.mean = sum / static_cast<double>(n);
  // Linear interpolation between order statistics (numpy's default quantile).
  auto quantile = [&](double q) {
    const double position = q * static_cast<double>(n - 1);
    const auto below = static_cast<std::size_t>(std::floor(position));
    const auto above = std::min(below + 1, n - 1);
    const double fraction = position - static_cast<double>(below);
    return static_cast<double>(sorted[below]) * (1.0 - fraction) + static_cast<double>(sorted[above]) * fraction;
  };
  stats.median = quantile(0.5);
  stats.p95 = quantile(0.95);
  stats.shortest = sorted.front();
  stats.longest = sorted.back();
  const auto at_longest = std::count(sorted.begin(), sorted.end(), stats.longest);
  stats.share_at_longest = static_cast<double>(at_longest) / static_cast<double>(n);
  return stats;
}

std::vector<std::int64_t> lognormal_lengths(double mean_length, double sigma, std::int64_t min_length,
                                            std::int64_t max_length, std::int64_t count, std::uint64_t seed,
                                            OverLimit over_limit) {
  if (!(mean_length >= 1.0) || !std::isfinite(mean_length)) fail("data.mean_length must be >= 1, found {}", mean_length);
  if (!(sigma >= 0.0) || !std::isfinite(sigma)) fail("data.sigma must be >= 0, found {}", sigma);
  if (min_length < 1) fail("data.min_length must be >= 1, found {}", min_length);
  if (max_length < min_length) {
    fail("data.max_length ({}) must be >= data.min_length ({}) for the synthetic distribution", max_length, min_length);
  }
  if (count < 1) fail("the synthetic length pool must hold at least 1 sequence, found {}", count);
  // mu such that the mean of the untruncated log-normal is mean_length (as odc-data synth does).
  const double mu = std::log(mean_length) - 0.5 * sigma * sigma;
  const auto lo = static_cast<double>(min_length);
  const auto hi = static_cast<double>(max_length);
  // drop: sequence i's standard normal z maps to the same quantile of the normal restricted to
  // [z_lo, z_hi], the log-space limits: Phi^-1(Phi(z_lo) + Phi(z) * (Phi(z_hi) - Phi(z_lo))).
  double p_lo = 0.0;
  double p_hi = 1.0;
  const bool drop = over_limit == OverLimit::drop && sigma > 0.0;
  if (drop) {
    p_lo = standard_normal_cdf((std::log(lo - 0.5 > 0.0 ? lo - 0.5 : lo) - mu) / sigma);
    p_hi = standard_normal_cdf((std::log(hi + 0.5) - mu) / sigma);
    if (!(p_hi - p_lo > 1e-9)) {
      fail("data.min_length {} .. data.max_length {} keeps almost none of lognormal(mean {}, sigma {}): widen the "
           "limits, move data.mean_length into them, or set data.over_length = truncate",
           min_length, max_length, mean_length, sigma);
    }
  } else if (over_limit == OverLimit::drop) {  // sigma 0: every sequence has the one length
    const double only = std::exp(mu);
    if (only < lo - 0.5 || only > hi + 0.5) {
      fail("data.sigma 0 gives every sequence {:.0f} tokens, outside data.min_length {} .. data.max_length {}", only,
           min_length, max_length);
    }
  }
  std::vector<std::int64_t> out;
  out.reserve(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) {
    double z = normal_at(seed, i);
    if (drop) z = inverse_standard_normal_cdf(p_lo + standard_normal_cdf(z) * (p_hi - p_lo));
    const double drawn = std::exp(mu + sigma * z);
    // Clip in floating point first: exp() may overflow any integer type (and rounding may step
    // over a limit by one).
    const double clipped = std::clamp(drawn, lo, hi);
    out.push_back(static_cast<std::int64_t>(std::llround(clipped)));
  }
  return out;
}

LengthPool load_lengths(const LengthSource& source) {
  LengthPool pool;
  if (source.path.empty()) {
    pool.lengths = lognormal_lengths(source.mean_length, source.sigma, source.min_length, source.max_length,
                                     source.count, source.seed, source.over_limit);
    pool.description =
        fmt::format("synthetic lognormal(mean {}, sigma {}) {} [{}, {}], {} sequences", source.mean_length,
                    source.sigma, source.over_limit == OverLimit::drop ? "truncated to" : "clipped to",
                    source.min_length, source.max_length, source.count);
    return pool;
  }
  if (source.max_length < 0) fail("data.max_length must be >= 0, found {}", source.max_length);
  if (source.format == "lengths") {
    pool.lengths = read_length_file(source.path);
    pool.description = fmt::format("{} ({} lengths)", source.path, pool.lengths.size());
  } else if (source.format == "tokens" || source.format == "bin" || source.format == "rollouts") {
    const auto dataset = data::open_dataset(source.path, source.format, source.vocab_size,
                                            data::TextDataOptions{"", "auto", source.ignore_extra_fields});
    for (std::int64_t i = 0; i < dataset->size(); ++i) pool.lengths.push_back(dataset->length(i));
    if (pool.lengths.empty()) fail("{}: the dataset holds no sequences", dataset->describe());
    pool.description = dataset->describe();
  } else {
    fail("data.format must be lengths, tokens, bin or rollouts, found '{}'", source.format);
  }
  if (source.max_length > 0) {
    if (source.over_limit == OverLimit::drop) {
      const auto before = pool.lengths.size();
      std::erase_if(pool.lengths, [&](std::int64_t length) { return length > source.max_length; });
      pool.dropped = static_cast<std::int64_t>(before - pool.lengths.size());
      if (pool.lengths.empty()) {
        fail("{}: every sequence is longer than data.max_length = {} (data.over_length = drop)", pool.description,
             source.max_length);
      }
      if (pool.dropped > 0) {
        pool.description += fmt::format(", {} longer than {} tokens dropped", pool.dropped, source.max_length);
      }
    } else {
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
  }
  return pool;
}

}  // namespace odc::sim
