#pragma once
// Seeded random numbers that come out the same on every rank, world size, compiler and standard
// library. <random>'s distributions are implementation-defined (libstdc++ and libc++ draw different
// normals from the same engine), so everything here is built on splitmix64 and xoshiro256**, whose
// integer outputs are fixed by their definitions. The uniforms are exact; the normals also go
// through std::log/std::cos, which agree wherever the same C library runs (every rank of a job) and
// may differ in the last bit between C libraries.
//
// Counter-based draws (value = f(seed, index), see splitmix64 and normal_from_bits) need no state
// that walks through elements 0..i-1 to reach element i. That is what lets a rank initialize only its
// own shard of a unit and still hold exactly the numbers a world of any other size holds there, and
// what lets two ranks agree on a permutation or a synthetic dataset without communicating.
//
// Changing any function here changes model initialization, synthetic data, the sampler's order and
// the simulator's lengths: tests/unit/core/test_random.cpp pins the generators' outputs.
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <numbers>

namespace odc {

// The golden-ratio increment of splitmix64's state (2^64 / phi, odd).
inline constexpr std::uint64_t kSplitMix64Gamma = 0x9E3779B97F4A7C15ULL;

// splitmix64 (Steele, Lea & Flood 2014) as a pure function: the generator's output for state x, a
// bijection of 64-bit words with good avalanche. splitmix64(seed ^ key) is the project's
// counter-based draw.
constexpr std::uint64_t splitmix64(std::uint64_t x) {
  x += kSplitMix64Gamma;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// The seed of stream `index` under `base` (one per sequence, one per epoch): the odd multiplier, a
// bijection of 64-bit words, spreads consecutive indices over the whole word, so neighbouring
// streams do not start from neighbouring states.
constexpr std::uint64_t substream_seed(std::uint64_t base, std::uint64_t index) {
  return base ^ (index * 0xD1B54A32D192ED03ULL);
}

// splitmix64 as a generator: output k is splitmix64(seed + k * gamma).
class SplitMix64 {
 public:
  explicit constexpr SplitMix64(std::uint64_t seed) : state_(seed) {}
  constexpr std::uint64_t next() {
    const std::uint64_t out = splitmix64(state_);
    state_ += kSplitMix64Gamma;
    return out;
  }

 private:
  std::uint64_t state_;
};

// xoshiro256** (Blackman & Vigna 2018): a longer period and better statistics than splitmix64 for
// long sequential streams; seeded with four splitmix64 outputs, as its authors recommend.
class Xoshiro256StarStar {
 public:
  explicit constexpr Xoshiro256StarStar(std::uint64_t seed) {
    SplitMix64 seeder(seed);
    for (auto& word : state_) word = seeder.next();
  }

  constexpr std::uint64_t next() {
    const std::uint64_t result = std::rotl(state_[1] * 5, 7) * 9;
    const std::uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = std::rotl(state_[3], 45);
    return result;
  }

 private:
  std::array<std::uint64_t, 4> state_{};
};

// Uniform in [0, bound) without modulo bias: the lowest 2^64 mod bound outputs are redrawn, so
// every residue has the same number of accepted outputs. bound must be > 0.
template <typename Generator>
constexpr std::uint64_t uniform_below(Generator& generator, std::uint64_t bound) {
  const std::uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    const std::uint64_t r = generator.next();
    if (r >= threshold) return r % bound;
  }
}

// The top 53 bits of a word as a double in (0, 1]: never 0, so a log() of it stays finite.
constexpr double unit_open_zero(std::uint64_t bits) { return static_cast<double>((bits >> 11) + 1) * 0x1.0p-53; }

// The top 53 bits of a word as a double in [0, 1).
constexpr double unit_closed_zero(std::uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

// Box-Muller: a standard normal from u1 in (0, 1] and u2 in [0, 1].
inline double box_muller(double u1, double u2) {
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

// A standard normal from two independent words: the counter-based draw of the model's
// initialization and the simulator's lengths.
inline double normal_from_bits(std::uint64_t a, std::uint64_t b) {
  return box_muller(unit_open_zero(a), unit_closed_zero(b));
}

}  // namespace odc
