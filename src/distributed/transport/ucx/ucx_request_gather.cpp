// The request-gather protocol of UcxTransport (comm.gather_protocol: request, and auto for an
// owner whose region is not mapped here). Over TCP UCX 1.13 has no hardware get: ucp_get is
// emulated in software, one small fragment after another, and runs at a third to a half of
// MPI_Allgather. Instead:
//   client: every chunk (comm.network_chunk_bytes; comm.chunk_bytes to a mapped owner) of a gather is one request, a header-only active
//           message (request id, offset, count) to the owner; at most comm.max_inflight of the
//           client's operations are in flight; the chunk is done when its response has landed;
//   owner:  its progress thread answers each request with the bytes of its exposed region as an
//           active message, rendezvous for large chunks, so the client's UCX receives them
//           straight into the destination (ucp_am_recv_data_nbx), as a get would. The owner's
//           compute thread takes no part.
// ucx_progress.cpp issues both kinds of message and completes them (Op::events: a request is done
// once its send and its response are).
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <ucp/api/ucp.h>

#include "odc/core/error.h"
#include "ucx_internal.h"

namespace odc::distributed {

using detail::GatherRequestHeader;
using detail::GatherResponseHeader;
using detail::wrk;

namespace {

// Responses of at least this size go by rendezvous (zero-copy into the client's destination);
// smaller ones as UCX's eager messages, copied once on arrival.
constexpr std::size_t kResponseRendezvousBytes = 64 * 1024;

}  // namespace

GatherProtocol parse_gather_protocol(std::string_view name) {
  if (name == "auto") return GatherProtocol::automatic;
  if (name == "get") return GatherProtocol::get;
  if (name == "request") return GatherProtocol::request;
  fail("unknown comm.gather_protocol '{}': expected auto, get or request", name);
}

std::string_view gather_protocol_name(GatherProtocol protocol) {
  switch (protocol) {
    case GatherProtocol::automatic: return "auto";
    case GatherProtocol::get: return "get";
    case GatherProtocol::request: return "request";
  }
  return "?";
}

void UcxTransport::issue_gather_message(Op& op) {
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.send = &UcxCallbacks::on_send;
  p.user_data = &op;
  auto* ep = static_cast<ucp_ep_h>(endpoints_[static_cast<std::size_t>(op.peer)]);
  ucs_status_ptr_t st = nullptr;
  if (op.kind == Op::Kind::request) {
    op.request = GatherRequestHeader{next_request_id_++, rank_, 0, op.offset, op.count};
    requests_.emplace(op.request.id, &op);  // before the send: the answer may come within it
    st = ucp_am_send_nbx(ep, detail::kGatherRequestAmId, &op.request, sizeof(op.request), nullptr, 0, &p);
  } else {
    const std::size_t bytes = op.response.status == UCS_OK ? static_cast<std::size_t>(op.count) * sizeof(float) : 0;
    if (bytes >= kResponseRendezvousBytes) {
      p.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
      p.flags = UCP_AM_SEND_FLAG_RNDV;
    }
    st = ucp_am_send_nbx(ep, detail::kGatherResponseAmId, &op.response, sizeof(op.response),
                         bytes > 0 ? op.src : nullptr, bytes, &p);
  }
  if (st == nullptr) {
    finish(&op, UCS_OK);
  } else if (UCS_PTR_IS_ERR(st)) {
    finish(&op, UCS_PTR_STATUS(st));
  }
  // Otherwise in flight: UcxCallbacks::on_send finishes it.
}

void UcxTransport::serve_request(int client, std::uint64_t id, std::int64_t offset, std::int64_t count) {
  // Runs inside a UCX callback: the response is queued and sent from the progress loop.
  auto op = std::make_unique<Op>();
  op->kind = Op::Kind::response;
  op->owner = this;
  op->peer = client;
  op->offset = offset;
  op->count = count;
  op->response = GatherResponseHeader{id, rank_, UCS_OK, count};
  if (offset < 0 || count < 0 || offset + count > exposed_floats_) {
    // Answered with an error, so the client's wait names us instead of timing out.
    spdlog::error("rank {}: gather request from rank {} outside the exposed region: {} floats at {} of {}", rank_,
                  client, count, offset, exposed_floats_);
    op->response.status = UCS_ERR_INVALID_PARAM;
    op->response.count = 0;
  } else {
    op->src = exposed_ + offset;
  }
  op->completion = &serve_completion_;
  serve_completion_.pending_.fetch_add(1, std::memory_order_relaxed);
  serve_completion_.per_peer_[static_cast<std::size_t>(client)].fetch_add(1, std::memory_order_relaxed);
  responses_.push_back(std::move(op));
}

ucs_status_t UcxCallbacks::on_gather_request(void* arg, const void* header, std::size_t header_length,
                                             void* /*data*/, std::size_t /*length*/,
                                             const ucp_am_recv_param_t* /*param*/) {
  auto* t = static_cast<UcxTransport*>(arg);
  GatherRequestHeader h;
  if (!read_header(t, header, header_length, h, "gather request")) return UCS_OK;
  if (h.from < 0 || h.from >= t->world_size_) {
    t->record_fatal(fmt::format("gather request with invalid client rank {}", h.from));
    return UCS_OK;
  }
  t->serve_request(h.from, h.id, h.offset, h.count);
  return UCS_OK;
}

ucs_status_t UcxCallbacks::on_gather_response(void* arg, const void* header, std::size_t header_length, void* data,
                                              std::size_t length, const ucp_am_recv_param_t* param) {
  auto* t = static_cast<UcxTransport*>(arg);
  GatherResponseHeader h;
  if (!read_header(t, header, header_length, h, "gather response")) return UCS_OK;
  const auto it = t->requests_.find(h.id);
  if (it == t->requests_.end()) {
    // Its request failed to send and was completed with that error already.
    spdlog::warn("rank {}: dropping a gather response from rank {} to a request that is no longer waiting", t->rank_,
                 h.from);
    return UCS_OK;
  }
  UcxTransport::Op* op = it->second;
  t->requests_.erase(it);
  if (h.status != UCS_OK) {
    t->finish(op, h.status);
    return UCS_OK;
  }
  if (h.count != op->count || length != static_cast<std::size_t>(op->count) * sizeof(float)) {
    t->record_fatal(fmt::format("malformed gather response from rank {}: {} bytes for a request of {} floats", h.from,
                                length, op->count));
    t->finish(op, UCS_ERR_MESSAGE_TRUNCATED);
    return UCS_OK;
  }
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) == 0) {
    std::memcpy(op->dest, data, length);
    t->finish(op, UCS_OK);
    return UCS_OK;
  }
  // Rendezvous: UCX moves the bytes straight into the gather's destination.
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.recv_am = &UcxCallbacks::on_response_data;
  p.user_data = op;
  ucs_status_ptr_t st = ucp_am_recv_data_nbx(wrk(t->worker_), data, op->dest, length, &p);
  if (st == nullptr) {
    t->finish(op, UCS_OK);
  } else if (UCS_PTR_IS_ERR(st)) {
    t->finish(op, UCS_PTR_STATUS(st));
  }
  return UCS_OK;
}

void UcxCallbacks::on_response_data(void* request, ucs_status_t status, std::size_t /*length*/, void* user_data) {
  auto* op = static_cast<UcxTransport::Op*>(user_data);
  op->owner->finish(op, status);
  ucp_request_free(request);
}

}  // namespace odc::distributed
