#pragma once
// MpiContextExchange: the context exchange between ranks on several hosts, MPI point to point
// between the group's members only, on a communicator duplicated once at construction (no
// communicator per group, no collective per exchange: ranks outside the group never see it).
//
// One exchange on member X: for every other member P, this pair's exchange number n[P] += 1
// (both sides count alike: a pair's shared exchanges happen in the same order on both), which
// picks the pair's MPI tags (a header and the data). X sends every other member a header
// (group tag, n, the bytes it sends that member) and its pieces for that member as one message
// (an hindexed datatype over `mine`: no packing on the host), and receives the same from every
// member it reads from (an hindexed datatype over `into`). A header whose group tag or number is
// not this exchange's means the two ranks run their exchanges in different orders: an odc::Error
// naming both. Every request is polled with MPI_Test against options.timeout_s; the error names
// `what`, the group's tag and the peers whose messages are outstanding (MPI ends the job of a
// dead rank itself).
//
// Rows on a device (`device` non-null) travel through host buffers with the backend's copies:
// `mine` is downloaded whole into the send staging (after the compute stream's work: download
// synchronizes), and each member's pieces arrive packed in the receive staging, one member at a
// time, are uploaded and copied to their places in `into` on the compute stream. On a device the
// pieces' offsets and sizes must be whole 4-byte words (the backend moves fp32 elements).
#include <cstdint>
#include <vector>

#include <mpi.h>

#include "odc/backend/backend.h"
#include "odc/distributed/group/mpi_host_group.h"
#include "odc/distributed/transport/context/context_exchange.h"

namespace odc::distributed {

class MpiContextExchange final : public GroupContextExchange {
 public:
  // Collective over `group` (MPI_Comm_dup). `device`: the backend holding the rows, null for host
  // memory; it must outlive the exchange.
  MpiContextExchange(MpiHostGroup& group, backend::Backend* device, const ContextExchangeOptions& options);
  ~MpiContextExchange() override;
  MpiContextExchange(const MpiContextExchange&) = delete;
  MpiContextExchange& operator=(const MpiContextExchange&) = delete;

  void exchange(const model::ContextSplit& split, std::span<const model::ExchangePiece> pieces, const void* mine,
                std::int64_t mine_bytes, void* into, std::int64_t into_bytes, std::string_view what) override;

  ContextExchangeKind kind() const override { return ContextExchangeKind::mpi; }
  int rank() const override { return rank_; }
  PlannedMemory allocated() const override;

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  backend::Backend* device_ = nullptr;
  ContextExchangeOptions options_;
  int rank_ = 0;
  int world_ = 1;
  int tag_span_ = 1;                  // pair numbers map to tags modulo this
  std::vector<std::uint64_t> count_;  // per peer: exchanges taken part in together
  std::vector<float> send_staging_;   // device rows only
  std::vector<float> receive_staging_;
  std::unique_ptr<backend::Buffer> upload_staging_;
};

}  // namespace odc::distributed
