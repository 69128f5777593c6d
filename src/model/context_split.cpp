#include "odc/model/context_split.h"

#include <algorithm>

#include "odc/core/error.h"

namespace odc::model {

std::int64_t ContextCut::chunk_begin(int c) const {
  ODC_CHECK(k >= 1 && c >= 0 && c <= chunks(), "context cut: chunk {} of {} (k = {})", c, chunks(), k);
  const std::int64_t n = chunks();
  const std::int64_t base = length / n;
  const std::int64_t longer = length % n;  // the first `longer` chunks hold base + 1 tokens
  return c * base + std::min<std::int64_t>(c, longer);
}

std::int64_t ContextCut::rows_of(int member) const {
  const auto [a, b] = chunks_of(member);
  return chunk_rows(a) + chunk_rows(b);
}

double ContextCut::pairs_of(int member) const {
  double pairs = 0.0;
  for (const int c : chunks_of(member)) {
    const auto rows = static_cast<double>(chunk_rows(c));
    pairs += rows * static_cast<double>(chunk_begin(c)) + rows * (rows + 1.0) / 2.0;
  }
  return pairs;
}

std::int64_t ContextSplit::local_rows() const {
  std::int64_t rows = 0;
  for (std::size_t s = 0; s < lengths.size(); ++s) rows += cut(s).rows_of(member);
  return rows;
}

std::int64_t ContextSplit::full_rows() const {
  std::int64_t rows = 0;
  for (const auto length : lengths) rows += length;
  return rows;
}

namespace {

// Where member m's chunks of each sequence sit in its local rows and in the full rows: calls
// visit(member, local_row, full_row, rows) for every non-empty chunk, in batch order.
template <typename Visit>
void for_each_chunk(const ContextSplit& split, int member, Visit visit) {
  std::int64_t local = 0;
  std::int64_t full = 0;
  for (std::size_t s = 0; s < split.lengths.size(); ++s) {
    const ContextCut cut = split.cut(s);
    for (const int c : cut.chunks_of(member)) {
      const std::int64_t rows = cut.chunk_rows(c);
      if (rows > 0) visit(local, full + cut.chunk_begin(c), rows);
      local += rows;
    }
    full += cut.length;
  }
}

void check_split(const ContextSplit& split, std::int64_t row_bytes) {
  ODC_CHECK(split.k() >= 1 && split.member >= 0 && split.member < split.k() && row_bytes > 0,
            "context split: member {} of a group of {} ranks, {} bytes per row", split.member, split.k(), row_bytes);
}

}  // namespace

std::vector<ExchangePiece> gather_pieces(const ContextSplit& split, std::int64_t row_bytes) {
  check_split(split, row_bytes);
  std::vector<ExchangePiece> pieces;
  for (int from = 0; from < split.k(); ++from) {
    for_each_chunk(split, from, [&](std::int64_t local, std::int64_t full, std::int64_t rows) {
      for (int to = 0; to < split.k(); ++to) {
        pieces.push_back({from, to, local * row_bytes, full * row_bytes, rows * row_bytes});
      }
    });
  }
  return pieces;
}

std::vector<ExchangePiece> scatter_pieces(const ContextSplit& split, std::int64_t row_bytes) {
  check_split(split, row_bytes);
  std::vector<ExchangePiece> pieces;
  for (int to = 0; to < split.k(); ++to) {
    ContextSplit of_to = split;
    of_to.member = to;
    const std::int64_t copy_bytes = of_to.local_rows() * row_bytes;
    for_each_chunk(split, to, [&](std::int64_t local, std::int64_t full, std::int64_t rows) {
      for (int from = 0; from < split.k(); ++from) {
        pieces.push_back({from, to, full * row_bytes, from * copy_bytes + local * row_bytes, rows * row_bytes});
      }
    });
  }
  return pieces;
}

}  // namespace odc::model

namespace odc::model {

namespace {

// The member holding chunk c of a cut, and the row where it starts among that member's rows of
// the sequence (its first chunk, then its second).
int owner_of(const ContextCut& cut, int c) { return c < cut.k ? c : cut.chunks() - 1 - c; }
std::int64_t row_in_owner(const ContextCut& cut, int c) { return c < cut.k ? 0 : cut.chunk_rows(owner_of(cut, c)); }

// Where each member's rows of sequence s start among its local rows.
std::vector<std::vector<std::int64_t>> local_starts(const ContextSplit& split) {
  std::vector<std::vector<std::int64_t>> starts(static_cast<std::size_t>(split.k()));
  for (int m = 0; m < split.k(); ++m) {
    std::int64_t at = 0;
    for (std::size_t s = 0; s < split.lengths.size(); ++s) {
      starts[static_cast<std::size_t>(m)].push_back(at);
      at += split.cut(s).rows_of(m);
    }
  }
  return starts;
}

// Calls visit(s, c, key_row) for member m's segments in batch order: sequence s's chunk c, whose
// key segment starts at key_row of m's key rows (empty chunks have none and are skipped).
template <typename Visit>
void for_each_segment(const ContextSplit& split, int m, Visit visit) {
  std::int64_t key_row = 0;
  for (std::size_t s = 0; s < split.lengths.size(); ++s) {
    const ContextCut cut = split.cut(s);
    for (const int c : cut.chunks_of(m)) {
      if (cut.chunk_rows(c) == 0) continue;
      visit(s, c, key_row);
      key_row += cut.chunk_begin(c + 1);
    }
  }
}

}  // namespace

std::vector<std::int32_t> key_bounds(const ContextSplit& split) {
  std::vector<std::int32_t> bounds{0};
  for (std::size_t s = 0; s < split.lengths.size(); ++s) {
    const ContextCut cut = split.cut(s);
    for (const int c : cut.chunks_of(split.member)) {
      const std::int64_t keys = cut.chunk_rows(c) > 0 ? cut.chunk_begin(c + 1) : 0;
      bounds.push_back(static_cast<std::int32_t>(bounds.back() + keys));
    }
  }
  return bounds;
}

std::vector<ExchangePiece> key_gather_pieces(const ContextSplit& split, std::int64_t row_bytes) {
  check_split(split, row_bytes);
  const auto starts = local_starts(split);
  std::vector<ExchangePiece> pieces;
  for (int to = 0; to < split.k(); ++to) {
    for_each_segment(split, to, [&](std::size_t s, int c, std::int64_t key_row) {
      const ContextCut cut = split.cut(s);
      for (int j = 0; j <= c; ++j) {  // the prefix: chunks 0..c, each from its member
        if (cut.chunk_rows(j) == 0) continue;
        const int from = owner_of(cut, j);
        const std::int64_t src = starts[static_cast<std::size_t>(from)][s] + row_in_owner(cut, j);
        pieces.push_back({from, to, src * row_bytes, (key_row + cut.chunk_begin(j)) * row_bytes,
                          cut.chunk_rows(j) * row_bytes});
      }
    });
  }
  return pieces;
}

KeyScatter key_scatter(const ContextSplit& split, std::int64_t row_bytes) {
  check_split(split, row_bytes);
  const auto starts = local_starts(split);
  KeyScatter out;
  std::vector<std::int64_t> received(static_cast<std::size_t>(split.k()), 0);  // rows, per receiving member
  for (int from = 0; from < split.k(); ++from) {
    for_each_segment(split, from, [&](std::size_t s, int c, std::int64_t key_row) {
      const ContextCut cut = split.cut(s);
      for (int j = 0; j <= c; ++j) {
        const std::int64_t rows = cut.chunk_rows(j);
        if (rows == 0) continue;
        const int to = owner_of(cut, j);
        std::int64_t& at = received[static_cast<std::size_t>(to)];
        out.pieces.push_back({from, to, (key_row + cut.chunk_begin(j)) * row_bytes, at * row_bytes, rows * row_bytes});
        if (to == split.member) out.sums.push_back({at, starts[static_cast<std::size_t>(to)][s] + row_in_owner(cut, j), rows});
        at += rows;
      }
    });
  }
  out.received_rows = received[static_cast<std::size_t>(split.member)];
  return out;
}

double split_causal_pairs(const ContextSplit& split) {
  double pairs = 0.0;
  for (std::size_t s = 0; s < split.lengths.size(); ++s) pairs += split.cut(s).pairs_of(split.member);
  return pairs;
}

}  // namespace odc::model
