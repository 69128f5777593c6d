// The seeded generators: published reference outputs, the counter-based identities callers rely
// on, an unbiased bounded draw, and the ranges and moments of the uniform and normal helpers.
#include <cmath>
#include <cstdint>
#include <set>
#include <vector>

#include <catch2/catch.hpp>

#include "odc/core/random.h"

using namespace odc;

namespace {

// Hands out a fixed list of words, to drive uniform_below through its rejection branch.
struct ScriptedGenerator {
  std::vector<std::uint64_t> words;
  std::size_t next_index = 0;
  std::uint64_t next() { return words.at(next_index++); }
};

}  // namespace

TEST_CASE("splitmix64 reproduces the reference generator's outputs", "[random]") {
  // Rosetta Code's "Pseudo-random numbers/Splitmix64" task: seed 1234567.
  SplitMix64 generator(1234567);
  const std::vector<std::uint64_t> expected = {6457827717110365317ULL, 3203168211198807973ULL, 9817491932198370423ULL,
                                               4593380528125082431ULL, 16408922859458223821ULL};
  for (const std::uint64_t value : expected) CHECK(generator.next() == value);
  // The first output from state 0, as in Vigna's splitmix64.c.
  CHECK(splitmix64(0) == 0xE220A8397B1DCDAFULL);
}

TEST_CASE("the generator's k-th output is the pure function at seed + k * gamma", "[random]") {
  // This is what makes splitmix64 counter-based: output k needs no walk through outputs 0..k-1.
  for (const std::uint64_t seed : {std::uint64_t{0}, std::uint64_t{7}, ~std::uint64_t{0}}) {
    SplitMix64 generator(seed);
    for (std::uint64_t k = 0; k < 100; ++k) CHECK(generator.next() == splitmix64(seed + k * kSplitMix64Gamma));
  }
}

TEST_CASE("xoshiro256** seeded by splitmix64 reproduces an independent implementation", "[random]") {
  // Computed with a Python transcription of Blackman & Vigna's xoshiro256starstar.c, state words
  // seeded by four splitmix64 outputs.
  Xoshiro256StarStar zero(0);
  CHECK(zero.next() == 0x99EC5F36CB75F2B4ULL);
  CHECK(zero.next() == 0xBF6E1F784956452AULL);
  CHECK(zero.next() == 0x1A5F849D4933E6E0ULL);
  Xoshiro256StarStar forty_two(42);
  CHECK(forty_two.next() == 0x15780B2E0C2EC716ULL);
  CHECK(forty_two.next() == 0x6104D9866D113A7EULL);
  CHECK(forty_two.next() == 0xAE17533239E499A1ULL);
}

TEST_CASE("substream seeds keep the base at index 0 and differ for every index", "[random]") {
  CHECK(substream_seed(12345, 0) == 12345);
  std::set<std::uint64_t> seeds;
  for (std::uint64_t i = 0; i < 10000; ++i) seeds.insert(substream_seed(99, i));
  CHECK(seeds.size() == 10000);  // the multiplier is odd, so index -> seed is a bijection
}

TEST_CASE("uniform_below rejects the biased low outputs and is uniform", "[random]") {
  // bound 2^63 + 1: 2^64 mod bound = 2^63 - 1 outputs would map twice onto [0, 2^63 - 1).
  const std::uint64_t bound = (std::uint64_t{1} << 63) + 1;
  const std::uint64_t threshold = (std::uint64_t{1} << 63) - 1;
  ScriptedGenerator scripted{{0, threshold - 1, threshold}};
  CHECK(uniform_below(scripted, bound) == threshold);  // the first two words are redrawn
  CHECK(scripted.next_index == 3);

  ScriptedGenerator top{{~std::uint64_t{0}}};
  CHECK(uniform_below(top, bound) == ~std::uint64_t{0} - bound);

  // Six buckets, 600000 draws: each count within 1% of 100000 (about 2.5 standard deviations).
  SplitMix64 generator(3);
  std::vector<int> counts(6, 0);
  for (int i = 0; i < 600000; ++i) ++counts[static_cast<std::size_t>(uniform_below(generator, 6))];
  for (const int count : counts) CHECK(std::abs(count - 100000) < 1000);

  SplitMix64 one(5);
  for (int i = 0; i < 10; ++i) CHECK(uniform_below(one, 1) == 0);
}

TEST_CASE("unit intervals cover (0, 1] and [0, 1) in steps of 2^-53", "[random]") {
  const std::uint64_t all_ones = ~std::uint64_t{0};
  CHECK(unit_open_zero(0) == 0x1.0p-53);  // never 0: log() stays finite
  CHECK(unit_open_zero(all_ones) == 1.0);
  CHECK(unit_closed_zero(0) == 0.0);
  CHECK(unit_closed_zero(all_ones) == 1.0 - 0x1.0p-53);
  // Only the top 53 bits count.
  CHECK(unit_open_zero(0x7FF) == unit_open_zero(0));
  CHECK(unit_closed_zero(std::uint64_t{1} << 11) == 0x1.0p-53);
}

TEST_CASE("Box-Muller maps known points exactly and draws standard normals", "[random]") {
  CHECK(box_muller(1.0, 0.25) == 0.0);
  CHECK(box_muller(std::exp(-0.5), 0.0) == Approx(1.0).epsilon(1e-15));
  CHECK(box_muller(std::exp(-2.0), 0.5) == Approx(-2.0).epsilon(1e-15));
  CHECK(normal_from_bits(~std::uint64_t{0}, 12345) == 0.0);  // u1 = 1

  // Counter-based draws as the model initialization makes them: mean 0, variance 1, and a tail
  // fraction |z| > 2 of 4.55 %.
  const int n = 200000;
  double sum = 0.0, sum_sq = 0.0;
  int tail = 0;
  for (int i = 0; i < n; ++i) {
    const auto counter = static_cast<std::uint64_t>(i) * 2;
    const double z = normal_from_bits(splitmix64(77 ^ splitmix64(counter)), splitmix64(77 ^ splitmix64(counter + 1)));
    sum += z;
    sum_sq += z * z;
    tail += std::abs(z) > 2.0 ? 1 : 0;
  }
  const double mean = sum / n;
  CHECK(std::abs(mean) < 0.01);
  CHECK(sum_sq / n - mean * mean == Approx(1.0).margin(0.01));
  CHECK(static_cast<double>(tail) / n == Approx(0.0455).margin(0.002));
}
