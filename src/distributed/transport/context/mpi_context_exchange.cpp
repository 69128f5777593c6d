// MpiContextExchange (mpi_context_exchange.h): point-to-point messages between a group's members.
#include "odc/distributed/transport/context/mpi_context_exchange.h"

#include <chrono>
#include <cstring>
#include <limits>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "odc/core/error.h"
#include "odc/distributed/group/watchdog.h"

namespace odc::distributed {

namespace {

// What a member sends every other member before its rows: the receiver checks that both are in
// the same exchange.
struct Header {
  std::uint64_t tag;
  std::uint64_t seq;
  std::int64_t bytes;
};

// An hindexed datatype over a buffer: the pieces' (offset, bytes), in order. MPI_DATATYPE_NULL
// when there are none. Freed by its owner once the operation is posted (MPI keeps it alive).
MPI_Datatype piece_type(const std::vector<std::pair<std::int64_t, std::int64_t>>& pieces, std::string_view what) {
  if (pieces.empty()) return MPI_DATATYPE_NULL;
  std::vector<int> lengths;
  std::vector<MPI_Aint> offsets;
  for (const auto& [offset, bytes] : pieces) {
    if (bytes > std::numeric_limits<int>::max()) fail("{}: a piece of {} bytes is more than one MPI block holds", what, bytes);
    lengths.push_back(static_cast<int>(bytes));
    offsets.push_back(static_cast<MPI_Aint>(offset));
  }
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_Type_create_hindexed(static_cast<int>(pieces.size()), lengths.data(), offsets.data(), MPI_BYTE, &type);
  MPI_Type_commit(&type);
  return type;
}

// The requests of one exchange; on an error the outstanding ones are cancelled and freed, so no
// late message lands in a buffer the caller has reused.
class Requests {
 public:
  int add() {
    requests_.push_back(MPI_REQUEST_NULL);
    return static_cast<int>(requests_.size()) - 1;
  }
  MPI_Request* at(int i) { return &requests_[static_cast<std::size_t>(i)]; }
  bool done(int i) {
    MPI_Request* r = at(i);
    if (*r == MPI_REQUEST_NULL) return true;
    int flag = 0;
    MPI_Test(r, &flag, MPI_STATUS_IGNORE);
    return flag != 0;
  }
  ~Requests() {
    for (auto& r : requests_) {
      if (r == MPI_REQUEST_NULL) continue;
      MPI_Cancel(&r);
      MPI_Request_free(&r);
    }
  }

 private:
  std::vector<MPI_Request> requests_;
};

std::int64_t words(std::int64_t bytes) { return (bytes + 3) / 4; }

}  // namespace

MpiContextExchange::MpiContextExchange(MpiHostGroup& group, backend::Backend* device,
                                       const ContextExchangeOptions& options)
    : device_(device), options_(options), rank_(group.rank()), world_(group.size()) {
  options_.validate();
  {
    const Watchdog::Wait wait(group.watchdog(), "the context exchange's communicator (MPI_Comm_dup)");
    MPI_Comm_dup(group.comm(), &comm_);
  }
  void* upper = nullptr;
  int found = 0;
  MPI_Comm_get_attr(comm_, MPI_TAG_UB, &upper, &found);
  const int tag_ub = found != 0 ? *static_cast<int*>(upper) : 32767;
  tag_span_ = std::max(1, std::min(tag_ub, 1 << 24) / 2);  // two tags per pair exchange
  count_.assign(static_cast<std::size_t>(world_), 0);
  if (device_ != nullptr) {
    const auto n = static_cast<std::size_t>(words(options_.max_exposed_bytes));
    send_staging_.assign(n, 0.0f);
    receive_staging_.assign(n, 0.0f);
    upload_staging_ = std::make_unique<backend::Buffer>(device_->memory(), DType::f32);
    if (n > 0) upload_staging_->get(static_cast<std::int64_t>(n));
  }
}

MpiContextExchange::~MpiContextExchange() {
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

PlannedMemory MpiContextExchange::allocated() const {
  if (device_ == nullptr) return {};
  PlannedMemory m = planned_context_exchange(options_, kind(), world_, true);
  // The sizes as allocated (the plan's rules, the buffers' actual bytes).
  for (auto& item : m.items) {
    if (item.name == "context exchange send staging") item.bytes = static_cast<std::int64_t>(send_staging_.size() * 4);
    if (item.name == "context exchange receive staging") item.bytes = static_cast<std::int64_t>(receive_staging_.size() * 4);
    if (item.name == "context exchange upload staging") item.bytes = upload_staging_->capacity_bytes();
  }
  return m;
}

void MpiContextExchange::exchange(const model::ContextSplit& split, std::span<const model::ExchangePiece> pieces,
                                  const void* mine, std::int64_t mine_bytes, void* into, std::int64_t into_bytes,
                                  std::string_view what) {
  detail::check_exchange(split, pieces, rank_, world_, mine_bytes, into_bytes, options_.max_exposed_bytes, what);
  const int k = split.k();
  const int me = split.member;
  const auto rank_of = [&](int member) { return split.ranks[static_cast<std::size_t>(member)]; };
  const bool staged = device_ != nullptr;
  if (staged) {
    for (const auto& p : pieces) {
      if ((p.to == me || p.from == me) && (p.src % 4 != 0 || p.dst % 4 != 0 || p.bytes % 4 != 0)) {
        fail("{} (context group tag {:#x}): rows on a device travel in whole 4-byte words, but a piece moves {} bytes "
             "from byte {} to byte {}", what, split.tag, p.bytes, p.src, p.dst);
      }
    }
    ODC_CHECK(mine_bytes % 4 == 0, "{}: {} bytes of rows on a device are not whole 4-byte words", what, mine_bytes);
  }
  const auto ku = static_cast<std::size_t>(k);
  // Per member: the pieces this rank sends it ((src, bytes)) and receives from it ((dst, bytes)).
  std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> sends(ku), receives(ku);
  std::vector<std::int64_t> send_bytes(ku, 0), receive_bytes(ku, 0);
  for (const auto& p : pieces) {
    if (p.bytes == 0) continue;
    if (p.from == me && p.to == me) {
      // Our own rows: a local copy.
      if (staged) {
        const backend::ConstView from(static_cast<const char*>(mine) + p.src, DType::f32, device_->device(), p.bytes / 4);
        device_->copy(from, backend::View{static_cast<char*>(into) + p.dst, DType::f32, device_->device(), p.bytes / 4});
      } else {
        std::memcpy(static_cast<char*>(into) + p.dst, static_cast<const char*>(mine) + p.src, static_cast<std::size_t>(p.bytes));
      }
      continue;
    }
    if (p.from == me) {
      sends[static_cast<std::size_t>(p.to)].emplace_back(p.src, p.bytes);
      send_bytes[static_cast<std::size_t>(p.to)] += p.bytes;
    }
    if (p.to == me) {
      receives[static_cast<std::size_t>(p.from)].emplace_back(p.dst, p.bytes);
      receive_bytes[static_cast<std::size_t>(p.from)] += p.bytes;
    }
  }
  // The rows sent leave from host memory: on a device, `mine` downloaded whole (after the compute
  // stream's work, which download waits for; the previous exchange's uploads too).
  const char* send_base = static_cast<const char*>(mine);
  if (staged && mine_bytes > 0) {
    device_->download(backend::ConstView(mine, DType::f32, device_->device(), mine_bytes / 4),
                      std::span<float>(send_staging_.data(), static_cast<std::size_t>(mine_bytes / 4)));
    send_base = reinterpret_cast<const char*>(send_staging_.data());
  }

  Requests requests;
  std::vector<Header> out(ku), in(ku);
  std::vector<int> header_in(ku, -1), data_in(ku, -1), sent(ku, -1), header_out(ku, -1);
  std::vector<int> tags(ku, 0);
  for (int m = 0; m < k; ++m) {
    if (m == me) continue;
    const auto i = static_cast<std::size_t>(m);
    const std::uint64_t seq = ++count_[static_cast<std::size_t>(rank_of(m))];
    tags[i] = static_cast<int>(2 * (seq % static_cast<std::uint64_t>(tag_span_)));
    out[i] = Header{split.tag, seq, send_bytes[i]};
    header_out[i] = requests.add();
    MPI_Isend(&out[i], static_cast<int>(sizeof(Header)), MPI_BYTE, rank_of(m), tags[i], comm_, requests.at(header_out[i]));
    header_in[i] = requests.add();
    MPI_Irecv(&in[i], static_cast<int>(sizeof(Header)), MPI_BYTE, rank_of(m), tags[i], comm_, requests.at(header_in[i]));
    if (!sends[i].empty()) {
      MPI_Datatype type = piece_type(sends[i], what);
      sent[i] = requests.add();
      MPI_Isend(send_base, 1, type, rank_of(m), tags[i] + 1, comm_, requests.at(sent[i]));
      MPI_Type_free(&type);
    }
    if (!receives[i].empty() && !staged) {
      MPI_Datatype type = piece_type(receives[i], what);
      data_in[i] = requests.add();
      MPI_Irecv(into, 1, type, rank_of(m), tags[i] + 1, comm_, requests.at(data_in[i]));
      MPI_Type_free(&type);
    }
  }

  // On a device, one member's rows at a time through the receive staging: received packed,
  // uploaded, copied to their places.
  int staged_member = -1;
  const auto post_staged = [&] {
    for (int m = staged_member + 1; m < k; ++m) {
      const auto i = static_cast<std::size_t>(m);
      if (m == me || receives[i].empty()) continue;
      staged_member = m;
      data_in[i] = requests.add();
      MPI_Irecv(receive_staging_.data(), static_cast<int>(receive_bytes[i]), MPI_BYTE, rank_of(m), tags[i] + 1, comm_,
                requests.at(data_in[i]));
      return;
    }
    staged_member = k;
  };
  const auto unpack_staged = [&](int m) {
    const auto i = static_cast<std::size_t>(m);
    const backend::ConstView up = device_->upload(
        std::span<const float>(receive_staging_.data(), static_cast<std::size_t>(receive_bytes[i] / 4)), *upload_staging_);
    std::int64_t at = 0;
    for (const auto& [dst, bytes] : receives[i]) {
      device_->copy(up.at(at / 4, bytes / 4),
                    backend::View{static_cast<char*>(into) + dst, DType::f32, device_->device(), bytes / 4});
      at += bytes;
    }
    device_->synchronize();  // the staging is free for the next member's rows
  };
  if (staged) post_staged();

  std::vector<bool> header_checked(ku, false), data_done(ku, false);
  for (std::size_t i = 0; i < ku; ++i) data_done[i] = receives[i].empty();
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(options_.timeout_s));
  for (std::int64_t round = 0;; ++round) {
    bool all = true;
    for (int m = 0; m < k; ++m) {
      if (m == me) continue;
      const auto i = static_cast<std::size_t>(m);
      if (!header_checked[i] && requests.done(header_in[i])) {
        header_checked[i] = true;
        if (in[i].tag != split.tag || in[i].seq != out[i].seq || in[i].bytes != receive_bytes[i]) {
          fail("{} (context group tag {:#x}, {}): rank {} is in its exchange {} with rank {} of group tag {:#x}, "
               "sending {} bytes, where rank {} is in exchange {} expecting {} bytes: the two ranks run their context "
               "exchanges in different orders or with different pieces",
               what, split.tag, detail::describe_group(split), rank_of(m), in[i].seq, rank_, in[i].tag, in[i].bytes,
               rank_, out[i].seq, receive_bytes[i]);
        }
      }
      if (!data_done[i] && data_in[i] >= 0 && requests.done(data_in[i])) {
        data_done[i] = true;
        if (staged) {
          unpack_staged(m);
          post_staged();
        }
      }
      all = all && header_checked[i] && data_done[i] && requests.done(header_out[i]) &&
            (sent[i] < 0 || requests.done(sent[i]));
    }
    if (all) break;
    if (round > 64) std::this_thread::sleep_for(std::chrono::microseconds(round < 1024 ? 10 : 100));
    if ((round & 63) == 0 && std::chrono::steady_clock::now() >= deadline) {
      std::vector<std::string> waiting;
      for (int m = 0; m < k; ++m) {
        const auto i = static_cast<std::size_t>(m);
        if (m == me) continue;
        if (!header_checked[i] || !data_done[i]) waiting.push_back(fmt::format("rank {} (its rows not received)", rank_of(m)));
        else if (!requests.done(header_out[i]) || (sent[i] >= 0 && !requests.done(sent[i]))) {
          waiting.push_back(fmt::format("rank {} (this rank's rows not taken)", rank_of(m)));
        }
      }
      fail("{} (context group tag {:#x}, {}): rank {} waited {} s for {}", what, split.tag,
           detail::describe_group(split), rank_, options_.timeout_s, fmt::join(waiting, ", "));
    }
  }
}

}  // namespace odc::distributed
