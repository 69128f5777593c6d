// data.max_length over any dataset: a view that cuts or skips sequences, or an error naming the
// first sequence that is too long.
#include "odc/data/length_limit.h"

#include <algorithm>

#include <fmt/format.h>

#include "odc/core/error.h"

namespace odc::data {

OverLength parse_over_length(const std::string& name) {
  if (name == "error") return OverLength::error;
  if (name == "truncate") return OverLength::truncate;
  if (name == "drop") return OverLength::drop;
  fail("data.over_length must be one of error, truncate, drop; got '{}'", name);
}

std::string over_length_name(OverLength policy) {
  switch (policy) {
    case OverLength::error: return "error";
    case OverLength::truncate: return "truncate";
    case OverLength::drop: return "drop";
  }
  fail("unknown OverLength value {}", static_cast<int>(policy));
}

namespace {

// Prediction targets among the first `length` positions: positions 1..length-1 whose mask is set
// (position 0 is never predicted), as TokenDataset::target_count counts them.
std::int64_t targets_within(const SequenceView& sequence, std::int64_t length) {
  const auto mask = sequence.target_mask.first(static_cast<std::size_t>(length));
  return mask.size() < 2 ? 0 : std::count_if(mask.begin() + 1, mask.end(), [](std::uint8_t m) { return m != 0; });
}

}  // namespace

LengthLimitedDataset::LengthLimitedDataset(std::unique_ptr<TokenDataset> inner, const LengthLimit& limit)
    : inner_(std::move(inner)), limit_(limit) {
  ODC_CHECK(limit.max_length > 0 && limit.policy != OverLength::error, "LengthLimitedDataset needs truncate or drop");
  const std::int64_t n = inner_->size();
  report_.sequences_before = n;
  if (limit_.policy == OverLength::truncate) target_counts_.reserve(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t length = inner_->length(i);
    const bool over = length > limit_.max_length;
    if (over) {
      ++report_.over;
      report_.longest = std::max(report_.longest, length);
    }
    if (limit_.policy == OverLength::drop) {
      if (!over) kept_.push_back(i);
      continue;
    }
    if (!over) {
      target_counts_.push_back(inner_->target_count(i));
      continue;
    }
    const std::int64_t targets = targets_within(inner_->get(i), limit_.max_length);
    if (targets == 0 && inner_->target_count(i) > 0) ++report_.lost_targets;
    target_counts_.push_back(targets);
  }
  if (limit_.policy == OverLength::drop && kept_.empty()) {
    fail("{}: every one of its {} sequences is longer than data.max_length = {} (data.over_length: drop leaves "
         "nothing to train on)",
         inner_->describe(), n, limit_.max_length);
  }
}

std::int64_t LengthLimitedDataset::size() const {
  return limit_.policy == OverLength::drop ? static_cast<std::int64_t>(kept_.size()) : inner_->size();
}

std::int64_t LengthLimitedDataset::inner_index(std::int64_t index) const {
  ODC_CHECK(index >= 0 && index < size(), "index {} of {}", index, describe());
  return limit_.policy == OverLength::drop ? kept_[static_cast<std::size_t>(index)] : index;
}

SequenceView LengthLimitedDataset::get(std::int64_t index) const {
  const SequenceView whole = inner_->get(inner_index(index));
  const auto count = std::min(whole.tokens.size(), static_cast<std::size_t>(limit_.max_length));
  return SequenceView{whole.tokens.first(count), whole.target_mask.first(count)};
}

std::int64_t LengthLimitedDataset::length(std::int64_t index) const {
  return std::min(inner_->length(inner_index(index)), limit_.max_length);
}

std::int64_t LengthLimitedDataset::target_count(std::int64_t index) const {
  const std::int64_t inner = inner_index(index);
  return limit_.policy == OverLength::drop ? inner_->target_count(inner)
                                           : target_counts_[static_cast<std::size_t>(inner)];
}

std::string LengthLimitedDataset::describe() const {
  if (limit_.policy == OverLength::drop) {
    return fmt::format("{}, {} sequences after dropping {} longer than data.max_length = {}", inner_->describe(),
                       size(), report_.over, limit_.max_length);
  }
  return fmt::format("{}, {} sequences truncated to data.max_length = {}", inner_->describe(), report_.over,
                     limit_.max_length);
}

std::string LengthLimitedDataset::record(std::int64_t index) const { return inner_->record(inner_index(index)); }

std::optional<PolicyView> LengthLimitedDataset::policy(std::int64_t index) const {
  auto whole = inner_->policy(inner_index(index));
  if (!whole) return whole;
  const auto count = static_cast<std::size_t>(length(index));
  whole->logprobs = whole->logprobs.first(std::min(count, whole->logprobs.size()));
  whole->ref_logprobs = whole->ref_logprobs.first(std::min(count, whole->ref_logprobs.size()));
  return whole;
}

std::unique_ptr<TokenDataset> limit_lengths(std::unique_ptr<TokenDataset> dataset, const LengthLimit& limit,
                                            LengthLimitReport* report) {
  if (report != nullptr) *report = LengthLimitReport{0, 0, 0, dataset->size()};
  if (limit.max_length <= 0) return dataset;
  std::int64_t first = -1, over = 0;
  for (std::int64_t i = 0; i < dataset->size(); ++i) {
    if (dataset->length(i) <= limit.max_length) continue;
    if (first < 0) first = i;
    ++over;
  }
  if (over == 0) return dataset;
  if (limit.policy == OverLength::error) {
    fail("{}: the sequence has {} tokens, more than data.max_length = {} (record {} of the dataset, counted from 0; "
         "{} of its {} sequences are longer; data.over_length: truncate cuts them to their first {} tokens, drop "
         "leaves them out)",
         dataset->record(first), dataset->length(first), limit.max_length, first, over, dataset->size(),
         limit.max_length);
  }
  auto limited = std::make_unique<LengthLimitedDataset>(std::move(dataset), limit);
  if (report != nullptr) *report = limited->report();
  return limited;
}

}  // namespace odc::data
