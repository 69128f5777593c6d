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
