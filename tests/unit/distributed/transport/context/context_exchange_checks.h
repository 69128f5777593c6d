#pragma once
// The context exchange's checks, written once for the unit tests (ranks as threads) and the MPI
// tests (ranks as processes): a member's rows are bytes that name their sequence, position and
// byte (and, for the gradients, the member that sent them), so every received byte is checked
// against what its sender held, computed here from the cut alone (not from the pieces).
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "odc/model/context_split.h"

namespace odc::test {

// A byte that no other (sequence, position, byte, salt) is likely to share.
inline std::uint8_t row_byte(std::uint64_t salt, std::size_t sequence, std::int64_t position, std::int64_t byte) {
  std::uint64_t z = salt * 0x9E3779B97F4A7C15ULL + sequence * 0xBF58476D1CE4E5B9ULL +
                    static_cast<std::uint64_t>(position) * 0x94D049BB133111EBULL + static_cast<std::uint64_t>(byte) + 1;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return static_cast<std::uint8_t>(z ^ (z >> 31));
}

// Calls visit(sequence, position) for every row `member` holds, in its local order.
template <typename Visit>
void local_rows(const model::ContextSplit& split, int member, Visit visit) {
  for (std::size_t s = 0; s < split.lengths.size(); ++s) {
    const model::ContextCut cut{split.lengths[s], split.k()};
    for (const int c : cut.chunks_of(member)) {
      for (std::int64_t p = cut.chunk_begin(c); p < cut.chunk_begin(c + 1); ++p) visit(s, p);
    }
  }
}

// Runs the keys' gather and the gradients' scatter of `split` on this member through `exchange`
// and checks every byte received: "" when all match, else what differs first.
inline std::string check_context_exchange(model::ContextExchange& exchange, const model::ContextSplit& split,
                                          std::int64_t row_bytes, std::uint64_t salt) {
  const int k = split.k();
  const std::int64_t local = split.local_rows();
  const std::int64_t full = split.full_rows();
  // Gather: every member's local rows, valued by (sequence, position), land as the full rows.
  std::vector<std::uint8_t> mine;
  local_rows(split, split.member, [&](std::size_t s, std::int64_t p) {
    for (std::int64_t b = 0; b < row_bytes; ++b) mine.push_back(row_byte(salt, s, p, b));
  });
  std::vector<std::uint8_t> into(static_cast<std::size_t>(full * row_bytes), 0xEE);
  const auto gather = model::gather_pieces(split, row_bytes);
  exchange.exchange(split, gather, mine.data(), static_cast<std::int64_t>(mine.size()), into.data(),
                    static_cast<std::int64_t>(into.size()), "the keys' gather");
  std::size_t at = 0;
  for (std::size_t s = 0; s < split.lengths.size(); ++s) {
    for (std::int64_t p = 0; p < split.lengths[s]; ++p) {
      for (std::int64_t b = 0; b < row_bytes; ++b, ++at) {
        if (into[at] != row_byte(salt, s, p, b)) {
          return fmt::format("gather, member {} of tag {:#x}: sequence {} position {} byte {} is {}, expected {}",
                             split.member, split.tag, s, p, b, into[at], row_byte(salt, s, p, b));
        }
      }
    }
  }
  // Scatter: member j's full rows, valued by (j, sequence, position), reach the rows' holders as
  // copy j.
  const auto salt_of = [&](int member) { return salt * 31 + 1000 + static_cast<std::uint64_t>(member); };
  std::vector<std::uint8_t> grads;
  for (std::size_t s = 0; s < split.lengths.size(); ++s) {
    for (std::int64_t p = 0; p < split.lengths[s]; ++p) {
      for (std::int64_t b = 0; b < row_bytes; ++b) grads.push_back(row_byte(salt_of(split.member), s, p, b));
    }
  }
  std::vector<std::uint8_t> copies(static_cast<std::size_t>(k * local * row_bytes), 0xEE);
  const auto scatter = model::scatter_pieces(split, row_bytes);
  exchange.exchange(split, scatter, grads.data(), static_cast<std::int64_t>(grads.size()), copies.data(),
                    static_cast<std::int64_t>(copies.size()), "the keys' gradients");
  at = 0;
  for (int j = 0; j < k; ++j) {
    std::string error;
    local_rows(split, split.member, [&](std::size_t s, std::int64_t p) {
      for (std::int64_t b = 0; b < row_bytes; ++b, ++at) {
        if (error.empty() && copies[at] != row_byte(salt_of(j), s, p, b)) {
          error = fmt::format("scatter, member {} of tag {:#x}: copy {} sequence {} position {} byte {} is {}, expected {}",
                              split.member, split.tag, j, s, p, b, copies[at], row_byte(salt_of(j), s, p, b));
        }
      }
    });
    if (!error.empty()) return error;
  }
  return "";
}

// The split of `ranks` on `rank` (which must be one of them).
inline model::ContextSplit split_of(std::vector<int> ranks, int rank, std::vector<std::int64_t> lengths,
                                    std::uint64_t tag) {
  model::ContextSplit split;
  split.ranks = std::move(ranks);
  for (std::size_t i = 0; i < split.ranks.size(); ++i) {
    if (split.ranks[i] == rank) split.member = static_cast<int>(i);
  }
  split.lengths = std::move(lengths);
  split.tag = tag;
  return split;
}

}  // namespace odc::test
