#pragma once
// Context parallelism: a sequence too long for one rank is split across a group of k ranks, each
// holding a share of its tokens, and attention stays exact by exchanging keys and values between
// the group's members at every layer (and their gradients in the backward). Everything else a
// layer does is per token and runs on each member's rows alone.
//
// The cut (ContextCut): 2k chunks of near-equal length; member i holds chunks i and 2k-1-i
// ("zig-zag"), so every member's share of the causal attention work is about the same. Position
// ids continue across the cut: chunk c's tokens keep their positions in the whole sequence.
//
// A split microbatch (ContextSplit on a PackedBatch): every member of one group runs a microbatch
// holding the same split sequences in the same order; a member's rows are, sequence by sequence,
// its two chunks in position order, each a segment of cu_seqlens (an empty chunk: an empty
// segment). The exchange (ContextExchange) moves rows between the members only: ranks outside the
// group never take part nor wait.
#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace odc::model {

// How one sequence of `length` tokens is cut for a group of `k` members.
struct ContextCut {
  std::int64_t length = 0;
  int k = 1;

  int chunks() const { return 2 * k; }
  // Chunk c covers positions [chunk_begin(c), chunk_begin(c + 1)); the first length % 2k chunks
  // are one token longer than the others.
  std::int64_t chunk_begin(int c) const;
  std::int64_t chunk_rows(int c) const { return chunk_begin(c + 1) - chunk_begin(c); }
  // Member i's chunks, in position order.
  std::array<int, 2> chunks_of(int member) const { return {member, 2 * k - 1 - member}; }
  std::int64_t rows_of(int member) const;
  // Causal (query, key <= query) pairs of member's chunks against their prefixes: a chunk [b, e)
  // of r rows has r*b + r*(r+1)/2. Over the members they sum to L*(L+1)/2.
  double pairs_of(int member) const;
  // The most rows any member holds (the first member's; its chunks are the longest).
  std::int64_t max_rows() const { return rows_of(0); }
};

// A microbatch of split sequences on one member of their group.
struct ContextSplit {
  std::vector<int> ranks;             // the group; member i is ranks[i]
  int member = 0;                     // this rank's place in ranks
  std::vector<std::int64_t> lengths;  // the split sequences' whole lengths, in batch order
  // Names the group's microbatch (the same on every member, distinct within a minibatch): errors
  // and the exchange's consistency checks use it.
  std::uint64_t tag = 0;

  bool active() const { return ranks.size() > 1; }
  int k() const { return static_cast<int>(ranks.size()); }
  ContextCut cut(std::size_t sequence) const { return {lengths[sequence], k()}; }
  // Rows this member holds (the batch's tokens), and the whole sequences' rows (the keys every
  // member attends to after the gather).
  std::int64_t local_rows() const;
  std::int64_t full_rows() const;
};

// One piece of an exchange: `bytes` at byte `src` of member `from`'s exposed buffer land at byte
// `dst` of member `to`'s receiving buffer.
struct ExchangePiece {
  int from = 0;
  int to = 0;
  std::int64_t src = 0;
  std::int64_t dst = 0;
  std::int64_t bytes = 0;
};

// The all-gather of a split microbatch's rows (keys or values): member m's rows (`row_bytes` each,
// its local_rows() in batch order) to every member's full rows (full_rows(): sequence by sequence,
// its chunks in position order). Pieces are listed for every (from, to) pair, self included.
std::vector<ExchangePiece> gather_pieces(const ContextSplit& split, std::int64_t row_bytes);
// The reverse (the gradients of keys and values): every member's full rows to the members that
// hold them; member m receives k copies of its local rows, copy j (from member j) at byte
// j * local_rows() * row_bytes of the receiving buffer, to be summed.
std::vector<ExchangePiece> scatter_pieces(const ContextSplit& split, std::int64_t row_bytes);

// What a member's attention reads, for a split microbatch: each of its segments (one per chunk,
// the batch's cu_seqlens) attends to the keys of its sequence's positions [0, chunk end): its key
// segment, bounds cumulative over the member's key rows (an empty chunk: an empty key segment).
// The keys and values are gathered straight into that layout, and the gradients the attention's
// backward writes there go back to the chunks' members, who sum their copies.
std::vector<std::int32_t> key_bounds(const ContextSplit& split);
std::vector<ExchangePiece> key_gather_pieces(const ContextSplit& split, std::int64_t row_bytes);
// One copy of a member's rows to add: `rows` rows at row `from_row` of the received buffer onto
// row `to_row` of its local rows.
struct RowSum {
  std::int64_t from_row = 0;
  std::int64_t to_row = 0;
  std::int64_t rows = 0;
};
struct KeyScatter {
  std::vector<ExchangePiece> pieces;  // every member's (the same on all)
  std::vector<RowSum> sums;           // this member's, in the order it adds them (deterministic)
  std::int64_t received_rows = 0;     // this member's received buffer
};
KeyScatter key_scatter(const ContextSplit& split, std::int64_t row_bytes);
// Causal (query, key) pairs of a member's share: its chunks against their prefixes.
double split_causal_pairs(const ContextSplit& split);

// The most rows a member's key segments hold, and the most gradient copies it receives, for a split
// microbatch of `whole_rows` rows of whole sequences, whatever the group: twice them (each of its
// two chunks attends to at most its whole sequence, and each of its rows comes back at most once
// per segment that reads it; a short sequence comes near: 7 key rows of a 5-token one over 2).
// What a member exposes to one exchange is at most its key segments' gradients.
inline std::int64_t max_key_rows(std::int64_t whole_rows) { return 2 * whole_rows; }

// Moves rows between a group's members. Implementations live in the distributed layer (over one
// host's peer memory, or point to point between hosts); a one-rank run never needs one.
class ContextExchange {
 public:
  virtual ~ContextExchange() = default;
  // Collective among split.ranks only; every member passes the same `pieces`. `mine` (mine_bytes)
  // is read by the members the pieces send it to; the pieces addressed to this member land in
  // `into` (into_bytes). Both are in the memory of the model's backend (host or device) and were
  // written by work issued on its compute stream. Returns once this member's pieces are in `into`
  // (readable by work issued after this call) and no member still reads `mine` (both may be
  // reused). Bounded by the run's comm timeout; the error names `what` and the peer waited for.
  virtual void exchange(const ContextSplit& split, std::span<const ExchangePiece> pieces, const void* mine,
                        std::int64_t mine_bytes, void* into, std::int64_t into_bytes, std::string_view what) = 0;
};

}  // namespace odc::model
