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

// Epoch-based sampler over a dataset: a seeded permutation per epoch; next_minibatch returns the
// next `count` dataset indices, crossing epoch boundaries as needed.
class Sampler {
 public:
  Sampler(std::int64_t dataset_size, std::uint64_t seed, bool shuffle);
  std::vector<std::int64_t> next(std::int64_t count);
  std::int64_t epoch() const { return epoch_; }
  std::int64_t position() const { return position_; }

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
