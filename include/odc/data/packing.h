#pragma once
// Packing the sequences of one rank's share of a minibatch into microbatches of at most
// `max_tokens` tokens. (The load-balancing planners of a later stage plug in at the same place.)
#include <cstdint>
#include <vector>

namespace odc::data {

// Greedy first-fit in the given order: returns, per microbatch, the indices into `lengths`.
// A sequence longer than max_tokens is an odc::Error naming its length and the cap.
std::vector<std::vector<std::int64_t>> pack_in_order(const std::vector<std::int64_t>& lengths,
                                                     std::int64_t max_tokens);

// A sampler's position, small enough to store in a checkpoint. The permutation itself is not
// stored: it is a pure function of (seed, epoch, dataset_size, shuffle).
struct SamplerState {
  std::uint64_t seed = 0;
  std::int64_t epoch = 0;
  std::int64_t position = 0;  // index into the epoch's permutation of the next draw
  std::int64_t dataset_size = 0;
  bool shuffle = false;
  bool operator==(const SamplerState&) const = default;
};

// Epoch-based sampler over a dataset: a seeded permutation per epoch; next returns the next
// `count` dataset indices, crossing epoch boundaries as needed.
class Sampler {
 public:
  Sampler(std::int64_t dataset_size, std::uint64_t seed, bool shuffle);
  std::vector<std::int64_t> next(std::int64_t count);
  std::int64_t epoch() const { return epoch_; }
  std::int64_t position() const { return position_; }
  // Draws left before the current epoch ends (then the next epoch's permutation begins).
  std::int64_t remaining_in_epoch() const { return size_ - position_; }

  SamplerState state() const;
  // Continues from `state`, producing exactly the indices the saved sampler would have produced.
  // The state must come from a sampler over the same dataset size, seed and shuffle setting (an
  // odc::Error names the field that differs, e.g. after the dataset changed between runs).
  void restore(const SamplerState& state);

 private:
  void reshuffle();
  std::int64_t size_;
  std::uint64_t seed_;
  bool shuffle_;
  std::int64_t epoch_ = 0;
  std::int64_t position_ = 0;
  std::vector<std::int64_t> order_;
};

}  // namespace odc::data
