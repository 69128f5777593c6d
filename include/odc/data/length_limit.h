#pragma once
// A maximum sequence length over any dataset (data.max_length, data.over_length): sequences longer
// than the limit are an error naming the record, cut to their first max_length tokens (with their
// masks), or left out. The limit is a view over the opened dataset (tokens/jsonl, chat, text, bin
// alike): nothing is copied, and the dataset's fingerprint (which checkpoints and ranks compare)
// is that of what trains.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "odc/data/dataset.h"

namespace odc::data {

enum class OverLength { error, truncate, drop };
// "error" | "truncate" | "drop", else odc::Error
OverLength parse_over_length(const std::string& name);
std::string over_length_name(OverLength policy);

struct LengthLimit {
  std::int64_t max_length = 0;  // 0: no limit
  OverLength policy = OverLength::error;
};

// What applying a limit did (all zero when no sequence was longer than it).
struct LengthLimitReport {
  std::int64_t over = 0;          // sequences longer than the limit (truncated or dropped)
  std::int64_t longest = 0;       // the longest of them
  std::int64_t lost_targets = 0;  // truncated sequences left with no prediction target
  std::int64_t sequences_before = 0;
};

class LengthLimitedDataset final : public TokenDataset {
 public:
  // `policy` truncate or drop (error is limit_lengths's check). odc::Error when drop leaves nothing.
  LengthLimitedDataset(std::unique_ptr<TokenDataset> inner, const LengthLimit& limit);

  std::int64_t size() const override;
  SequenceView get(std::int64_t index) const override;
  std::int64_t length(std::int64_t index) const override;
  std::int64_t target_count(std::int64_t index) const override;
  std::string describe() const override;
  std::string record(std::int64_t index) const override;  // the inner dataset's record
  std::optional<PolicyView> policy(std::int64_t index) const override;  // cut as the tokens are
  const LengthLimitReport& report() const { return report_; }

 private:
  std::int64_t inner_index(std::int64_t index) const;
  std::unique_ptr<TokenDataset> inner_;
  LengthLimit limit_;
  LengthLimitReport report_;
  std::vector<std::int64_t> kept_;           // drop: the inner indices kept, ascending
  std::vector<std::int64_t> target_counts_;  // truncate: every sequence's target count after the cut
};

// Applies `limit` to `dataset`: the dataset itself when there is no limit or no sequence exceeds
// it (then `report`, if given, says so); with data.over_length error an odc::Error naming the first
// longer sequence's record (file:line or bin index), its index and length, and how many exceed;
// otherwise a LengthLimitedDataset, its report copied to `report`.
std::unique_ptr<TokenDataset> limit_lengths(std::unique_ptr<TokenDataset> dataset, const LengthLimit& limit,
                                            LengthLimitReport* report = nullptr);

}  // namespace odc::data
