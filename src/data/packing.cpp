// In-order packing and the epoch sampler. The shuffle draws from core/random.h (splitmix64 and an
// unbiased bounded draw), so every rank and every platform computes the same permutation: the
// global minibatch plan depends on all ranks agreeing on it.
#include "odc/data/packing.h"

#include <numeric>
#include <utility>

#include "odc/core/error.h"
#include "odc/core/random.h"

namespace odc::data {

std::vector<std::vector<std::int64_t>> pack_in_order(const std::vector<std::int64_t>& lengths,
                                                     std::int64_t max_tokens) {
  if (max_tokens <= 0) {
    fail("data.max_tokens_per_microbatch must be > 0, got {}", max_tokens);
  }
  std::vector<std::vector<std::int64_t>> microbatches;
  std::int64_t used = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    const std::int64_t length = lengths[i];
    if (length <= 0) fail("sequence {} has length {}; expected a length >= 1", i, length);
    if (length > max_tokens) {
      fail("sequence of length {} exceeds data.max_tokens_per_microbatch = {} (sequence {} of "
           "this minibatch); raise the cap or filter out longer sequences",
           length, max_tokens, i);
    }
    if (microbatches.empty() || used + length > max_tokens) {
      microbatches.emplace_back();
      used = 0;
    }
    microbatches.back().push_back(static_cast<std::int64_t>(i));
    used += length;
  }
  return microbatches;
}

Sampler::Sampler(std::int64_t dataset_size, std::uint64_t seed, bool shuffle)
    : size_(dataset_size), seed_(seed), shuffle_(shuffle) {
  if (dataset_size <= 0) fail("sampler needs a non-empty dataset, got {} sequences", dataset_size);
  reshuffle();
}

void Sampler::reshuffle() {
  order_.resize(static_cast<std::size_t>(size_));
  std::iota(order_.begin(), order_.end(), std::int64_t{0});
  if (!shuffle_) return;
  // Mixing the epoch into the seed gives every epoch its own, reproducible permutation.
  SplitMix64 generator(substream_seed(splitmix64(seed_), static_cast<std::uint64_t>(epoch_)));
  for (std::size_t i = order_.size() - 1; i > 0; --i) {
    const auto j = static_cast<std::size_t>(uniform_below(generator, i + 1));
    std::swap(order_[i], order_[j]);
  }
}

SamplerState Sampler::state() const {
  return SamplerState{seed_, epoch_, position_, size_, shuffle_};
}

void Sampler::restore(const SamplerState& state) {
  if (state.dataset_size != size_) {
    fail("sampler restore: dataset_size differs: saved state is over {} sequences, this dataset "
         "has {} (was the dataset changed?)",
         state.dataset_size, size_);
  }
  if (state.seed != seed_) {
    fail("sampler restore: seed differs: saved state has seed {}, this sampler {}", state.seed,
         seed_);
  }
  if (state.shuffle != shuffle_) {
    fail("sampler restore: shuffle differs: saved state has shuffle={}, this sampler shuffle={}",
         state.shuffle, shuffle_);
  }
  if (state.epoch < 0) fail("sampler restore: epoch must be >= 0, got {}", state.epoch);
  if (state.position < 0 || state.position >= size_) {
    fail("sampler restore: position must be in [0, {}), got {}", size_, state.position);
  }
  epoch_ = state.epoch;
  position_ = state.position;
  reshuffle();  // the permutation depends only on (seed, epoch)
}

std::vector<std::int64_t> Sampler::next(std::int64_t count) {
  if (count <= 0) fail("sampler: minibatch size must be > 0, got {}", count);
  std::vector<std::int64_t> indices;
  indices.reserve(static_cast<std::size_t>(count));
  for (std::int64_t k = 0; k < count; ++k) {
    indices.push_back(order_[static_cast<std::size_t>(position_)]);
    // Roll over eagerly, so (epoch(), position()) always names the next index to be drawn.
    if (++position_ == size_) {
      ++epoch_;
      position_ = 0;
      reshuffle();
    }
  }
  return indices;
}

}  // namespace odc::data
