#pragma once
// What the files of UcxTransport share privately (src/distributed only): the operation records the
// progress thread owns, the active-message ids and wire headers, and the UCX callbacks.
//   ucx_transport.cpp       set-up, teardown, the compute thread's get/push;
//   ucx_progress.cpp        the progress thread: issuing, completing, pushes and acks;
//   ucx_request_gather.cpp  the request-gather protocol (client and owner side);
//   ucx_waits.cpp           the compute thread's bounded waits.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <ucp/api/ucp.h>

#include "odc/core/error.h"
#include "odc/distributed/transport/ucx/ucx_transport.h"

namespace odc::distributed::detail {

constexpr unsigned kPushAmId = 7;
constexpr unsigned kAckAmId = 8;
constexpr unsigned kGatherRequestAmId = 9;
constexpr unsigned kGatherResponseAmId = 10;

// A request gather's ask: `count` floats at element `offset` of the owner's exposed region.
struct GatherRequestHeader {
  std::uint64_t id = 0;     // the client's request id, echoed in the response
  std::int32_t from = 0;    // the client rank
  std::int32_t unused = 0;
  std::int64_t offset = 0;
  std::int64_t count = 0;
};

// The owner's answer; the payload (count floats) follows unless status is an error.
struct GatherResponseHeader {
  std::uint64_t id = 0;
  std::int32_t from = 0;    // the owner rank
  std::int32_t status = 0;  // 0, or a ucs_status_t the client reports
  std::int64_t count = 0;
};

inline void check_ucs(ucs_status_t status, const char* what) {
  if (status != UCS_OK) fail("UCX {} failed: {}", what, ucs_status_string(status));
}

inline ucp_context_h ctx(void* p) { return static_cast<ucp_context_h>(p); }
inline ucp_worker_h wrk(void* p) { return static_cast<ucp_worker_h>(p); }

// Orders the plain stores of a gradient into a peer's mapped slot before the notification that
// announces it, and the owner's reads after receiving it (another process: the notification
// travels through UCX). ThreadSanitizer cannot model fences (GCC rejects them under
// -fsanitize=thread) and sees one process only; its builds get a compiler barrier, which is all
// these fences are on x86.
inline void slot_fence(std::memory_order order) {
#if defined(__SANITIZE_THREAD__)
  std::atomic_signal_fence(order);
#else
  std::atomic_thread_fence(order);
#endif
}

}  // namespace odc::distributed::detail

namespace odc::distributed {

struct UcxTransport::Op {
  // get: ucp_get; push: gradient slice (slot notification or payload); ack: slot released;
  // request: a request gather's ask, done once its response landed in `dest`;
  // response: the owner's answer to a request (owner side, counted in serving_).
  enum class Kind { get, push, ack, request, response } kind = Kind::get;
  UcxTransport* owner = nullptr;
  int peer = 0;
  float* dest = nullptr;
  const float* src = nullptr;
  std::int64_t offset = 0;
  std::int64_t count = 0;
  PushHeader header;
  detail::GatherRequestHeader request;
  detail::GatherResponseHeader response;
  // Events before the op is finished: 1, or 2 for a request (its send and its response).
  int events = 1;
  int status = 0;  // the first failure among its events (ucs_status_t)
  Completion* completion = nullptr;
};

// The slot protocol's signals over UCX (slot_protocol.h): a slot's notification and its ack are
// active messages; a client's slot states are flags here, cleared by the owner's ack.
struct UcxTransport::Slots final : public SlotSignals {
  explicit Slots(UcxTransport& transport) : t(transport) {}
  std::atomic<bool>& busy(int owner, int slot) {
    return t.slot_busy_[static_cast<std::size_t>(owner * t.options_.slots_per_client + slot)];
  }
  bool slot_free(int owner, int slot) override { return !busy(owner, slot).load(std::memory_order_acquire); }
  void post(int owner, int slot, const PushHeader& header) override {
    detail::slot_fence(std::memory_order_release);  // the slot's data before the notification
    busy(owner, slot).store(true, std::memory_order_release);
    t.send_control(owner, detail::kPushAmId, header);
  }
  bool posted(int client, int slot, PushHeader& header) override {
    auto& queue = t.slot_posted_[static_cast<std::size_t>(client)];
    if (queue.empty()) return false;
    if (queue.front().slot != slot) {
      fail("rank {}: slot notification from rank {} for slot {} where slot {} comes next (out of order)", t.rank_,
           client, queue.front().slot, slot);
    }
    header = queue.front();
    queue.pop_front();
    detail::slot_fence(std::memory_order_acquire);  // the slot's data after its notification
    return true;
  }
  void release(int client, int slot) override {
    t.send_control(client, detail::kAckAmId, PushHeader{0, t.rank_, 0, 0, slot, 0});
  }
  UcxTransport& t;
};

// A rendezvous push being received into one of the progress thread's reusable buffers.
struct UcxTransport::RecvOp {
  UcxTransport* owner = nullptr;
  PushHeader header;
  std::vector<float> buffer;
};

// UCX callbacks with the library's exact signatures, forwarding to the transport.
struct UcxCallbacks {
  // Copies an active message's fixed-size header into `h`; a header of another size is recorded
  // as the transport's fatal error ("malformed <what>: header of N bytes") and returns false.
  template <class Header>
  static bool read_header(UcxTransport* t, const void* header, std::size_t header_length, Header& h,
                          std::string_view what) {
    if (header_length != sizeof(Header)) {
      t->record_fatal(fmt::format("malformed {}: header of {} bytes", what, header_length));
      return false;
    }
    std::memcpy(&h, header, sizeof(Header));
    return true;
  }
  // ucx_progress.cpp
  static ucs_status_t on_ack(void* arg, const void* header, std::size_t header_length, void* data,
                             std::size_t length, const ucp_am_recv_param_t* param);
  static ucs_status_t on_push(void* arg, const void* header, std::size_t header_length, void* data,
                              std::size_t length, const ucp_am_recv_param_t* param);
  static void on_send(void* request, ucs_status_t status, void* user_data);
  static void on_push_data(void* request, ucs_status_t status, std::size_t length, void* user_data);
  // ucx_request_gather.cpp
  static ucs_status_t on_gather_request(void* arg, const void* header, std::size_t header_length, void* data,
                                        std::size_t length, const ucp_am_recv_param_t* param);
  static ucs_status_t on_gather_response(void* arg, const void* header, std::size_t header_length, void* data,
                                         std::size_t length, const ucp_am_recv_param_t* param);
  static void on_response_data(void* request, ucs_status_t status, std::size_t length, void* user_data);
  static void on_flushed(void* request, ucs_status_t status, void* user_data);
};

}  // namespace odc::distributed
