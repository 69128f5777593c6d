// UcxTransport's progress thread: it owns the UCX worker, issues what the compute thread queued
// (at most comm.max_inflight at a time), completes operations, receives gradient pushes and sends
// slot acks and gather responses outside UCX's callbacks. ucx_transport.cpp holds the set-up and the
// compute thread's side, ucx_request_gather.cpp the request-gather protocol.
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <exception>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <ucp/api/ucp.h>

#include "odc/core/error.h"
#include "ucx_internal.h"

namespace odc::distributed {

using detail::wrk;

namespace {

// The longest sleep with operations in flight over the network (see progress_loop).
constexpr long kNetworkSafetyNetNs = 50'000;

}  // namespace

ucs_status_t UcxCallbacks::on_ack(void* arg, const void* header, std::size_t header_length, void* /*data*/,
                                  std::size_t /*length*/, const ucp_am_recv_param_t* /*param*/) {
  auto* t = static_cast<UcxTransport*>(arg);
  PushHeader h;
  if (header_length != sizeof(h)) return UCS_OK;
  std::memcpy(&h, header, sizeof(h));
  // h.from is the owner that consumed our slot.
  if (h.from >= 0 && h.from < t->world_size_ && h.slot >= 0 && h.slot < t->options_.slots_per_client) {
    t->slot_busy_[static_cast<std::size_t>(h.from * t->options_.slots_per_client + h.slot)].store(
        false, std::memory_order_release);
    { std::lock_guard<std::mutex> lock(t->mutex_); }
    t->done_cv_.notify_all();
  }
  return UCS_OK;
}

void UcxCallbacks::on_send(void* request, ucs_status_t status, void* user_data) {
  auto* op = static_cast<UcxTransport::Op*>(user_data);
  op->owner->finish(op, status);
  ucp_request_free(request);
}

void UcxCallbacks::on_push_data(void* request, ucs_status_t status, std::size_t /*length*/, void* user_data) {
  auto* recv = static_cast<UcxTransport::RecvOp*>(user_data);
  UcxTransport* t = recv->owner;
  if (status == UCS_OK) {
    t->deliver(recv->header, recv->buffer.data());
  } else {
    t->record_fatal(fmt::format("receiving a gradient push from rank {} failed: {}", recv->header.from,
                                ucs_status_string(status)));
  }
  // The buffer goes back for the next push: no allocation (and no new UCX registration) per message.
  if (t->spare_buffers_.size() < static_cast<std::size_t>(2 * t->options_.max_inflight)) {
    t->spare_buffers_.push_back(std::move(recv->buffer));
  }
  t->rndv_receives_.erase(recv);
  ucp_request_free(request);
}

ucs_status_t UcxCallbacks::on_push(void* arg, const void* header, std::size_t header_length, void* data,
                                   std::size_t length, const ucp_am_recv_param_t* param) {
  auto* t = static_cast<UcxTransport*>(arg);
  PushHeader h;
  if (!read_header(t, header, header_length, h, "push")) return UCS_OK;
  if (h.slot >= 0) {  // slot protocol: the data is already in our region; the slot server takes it
    if (t->server_ == nullptr || h.from < 0 || h.from >= t->world_size_ || h.slot >= t->options_.slots_per_client ||
        h.count > t->options_.slot_floats) {
      t->record_fatal(fmt::format("malformed slot notification from rank {} (slot {}, {} floats)", h.from, h.slot,
                                  h.count));
      return UCS_OK;
    }
    t->slot_posted_[static_cast<std::size_t>(h.from)].push_back(h);
    return UCS_OK;
  }
  if (h.count * static_cast<std::int64_t>(sizeof(float)) != static_cast<std::int64_t>(length)) {
    t->record_fatal(fmt::format("malformed push from rank {}: {} bytes for {} floats", h.from, length, h.count));
    return UCS_OK;
  }
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) == 0) {
    t->deliver(h, data);
    return UCS_OK;
  }
  // Rendezvous: fetch the payload into a buffer of our own, deliver on completion.
  auto recv = std::make_unique<UcxTransport::RecvOp>();
  recv->owner = t;
  recv->header = h;
  recv->buffer = t->take_buffer(h.count);
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.recv_am = &UcxCallbacks::on_push_data;
  p.user_data = recv.get();
  ucs_status_ptr_t st = ucp_am_recv_data_nbx(wrk(t->worker_), data, recv->buffer.data(), length, &p);
  if (st == nullptr) {
    t->deliver(h, recv->buffer.data());
    t->spare_buffers_.push_back(std::move(recv->buffer));
  } else if (UCS_PTR_IS_ERR(st)) {
    t->record_fatal(fmt::format("receiving a gradient push from rank {} failed: {}", h.from,
                                ucs_status_string(UCS_PTR_STATUS(st))));
  } else {
    UcxTransport::RecvOp* key = recv.get();
    t->rndv_receives_.emplace(key, std::move(recv));
  }
  return UCS_OK;
}

std::vector<float> UcxTransport::take_buffer(std::int64_t floats) {
  std::vector<float> buffer;
  if (!spare_buffers_.empty()) {
    buffer = std::move(spare_buffers_.back());
    spare_buffers_.pop_back();
  }
  // Only ever grows: a buffer stays at the largest push it held (the chunk size), so a reused one
  // is neither reallocated nor zero-filled again.
  if (buffer.size() < static_cast<std::size_t>(floats)) buffer.resize(static_cast<std::size_t>(floats));
  return buffer;
}

void UcxTransport::issue(Op& op) {
  if (op.kind == Op::Kind::request || op.kind == Op::Kind::response) {
    issue_gather_message(op);
    return;
  }
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.send = &UcxCallbacks::on_send;
  p.user_data = &op;
  auto* ep = static_cast<ucp_ep_h>(endpoints_[static_cast<std::size_t>(op.peer)]);
  const std::size_t bytes = static_cast<std::size_t>(op.count) * sizeof(float);
  ucs_status_ptr_t st = nullptr;
  if (op.kind == Op::Kind::get) {
    const std::uint64_t remote = remote_bases_[static_cast<std::size_t>(op.peer)] +
                                 static_cast<std::uint64_t>(op.offset) * sizeof(float);
    st = ucp_get_nbx(ep, op.dest, bytes, remote, static_cast<ucp_rkey_h>(rkeys_[static_cast<std::size_t>(op.peer)]), &p);
  } else if (op.kind == Op::Kind::push) {
    st = ucp_am_send_nbx(ep, detail::kPushAmId, &op.header, sizeof(op.header), op.src, bytes, &p);
  } else {
    st = ucp_am_send_nbx(ep, detail::kAckAmId, &op.header, sizeof(op.header), nullptr, 0, &p);
  }
  if (st == nullptr) {
    finish(&op, UCS_OK);
  } else if (UCS_PTR_IS_ERR(st)) {
    finish(&op, UCS_PTR_STATUS(st));
  }
  // Otherwise in flight: UcxCallbacks::on_send finishes it.
}

void UcxTransport::finish(Op* op, int status) {
  if (status != UCS_OK && op->status == UCS_OK) op->status = status;
  if (status != UCS_OK && op->kind == Op::Kind::request && requests_.erase(op->request.id) > 0) {
    --op->events;  // the ask failed or its answer can no longer land: no response to wait for
  }
  if (--op->events > 0) return;
  Completion& c = *op->completion;
  if (op->status != UCS_OK && op->completion == &control_completion_) {
    record_fatal(fmt::format("slot {} {} rank {} failed: {}", op->kind == Op::Kind::ack ? "ack to" : "notification to",
                             op->header.slot, op->peer, ucs_status_string(static_cast<ucs_status_t>(op->status))));
  }
  if (op->status != UCS_OK && op->kind == Op::Kind::response) {
    // Nobody here waits for it; the client's wait times out naming us, and this says why.
    spdlog::error("rank {}: gather response to rank {} failed: {}", rank_, op->peer,
                  ucs_status_string(static_cast<ucs_status_t>(op->status)));
  }
  if (op->status != UCS_OK) {
    const char* what = "slot ack to";
    switch (op->kind) {
      case Op::Kind::get: what = "get from"; break;
      case Op::Kind::push: what = "push to"; break;
      case Op::Kind::ack: break;
      case Op::Kind::request: what = "request gather from"; break;
      case Op::Kind::response: what = "gather response to"; break;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (c.error_.empty()) {
      c.error_ = fmt::format("{} rank {} failed: {}", what, op->peer,
                             ucs_status_string(static_cast<ucs_status_t>(op->status)));
    }
  }
  c.per_peer_[static_cast<std::size_t>(op->peer)].fetch_sub(1, std::memory_order_relaxed);
  const bool last = c.pending_.fetch_sub(1, std::memory_order_acq_rel) == 1;
  if (op->kind == Op::Kind::response) {
    --serving_;
  } else {
    --inflight_;
  }
  inflight_ops_.erase(op);  // destroys op
  if (last) {
    { std::lock_guard<std::mutex> lock(mutex_); }
    done_cv_.notify_all();
  }
}

void UcxTransport::deliver(const PushHeader& header, const void* data) {
  if (header.from < 0 || header.from >= world_size_) {
    record_fatal(fmt::format("push with invalid sender rank {}", header.from));
    return;
  }
  try {
    if (reinterpret_cast<std::uintptr_t>(data) % alignof(float) == 0) {
      receiver_(header, static_cast<const float*>(data));
    } else {
      unaligned_.resize(static_cast<std::size_t>(header.count));
      std::memcpy(unaligned_.data(), data, static_cast<std::size_t>(header.count) * sizeof(float));
      receiver_(header, unaligned_.data());
    }
  } catch (const std::exception& e) {  // the progress thread must not die: report to the waiters
    record_fatal(e.what());
    return;
  }
}

void UcxTransport::send_control(int peer, unsigned am_id, const PushHeader& header) {
  // An operation like any other (its header must live until UCX is done with it).
  auto op = std::make_unique<Op>();
  op->kind = am_id == detail::kAckAmId ? Op::Kind::ack : Op::Kind::push;
  op->owner = this;
  op->peer = peer;
  op->src = nullptr;
  op->count = 0;
  op->header = header;
  op->completion = &control_completion_;
  control_completion_.pending_.fetch_add(1, std::memory_order_relaxed);
  control_completion_.per_peer_[static_cast<std::size_t>(peer)].fetch_add(1, std::memory_order_relaxed);
  Op* raw = op.get();
  inflight_ops_.emplace(raw, std::move(op));
  ++inflight_;
  issue(*raw);
}

bool UcxTransport::progress_slots() {
  if (slot_failed_ || (pusher_ == nullptr && server_ == nullptr)) return false;
  try {
    bool worked = false;
    if (server_ != nullptr) {
      const std::lock_guard<std::mutex> lock(handlers_mutex_);  // detach() waits for a serve in progress
      if (handlers_.receive) worked = server_->serve(handlers_);
    }
    if (pusher_ != nullptr) worked = pusher_->advance() || worked;
    return worked;
  } catch (const std::exception& e) {
    slot_failed_ = true;
    record_fatal(e.what());
    if (pusher_ != nullptr) pusher_->fail(std::current_exception());
    return false;
  }
}

void UcxTransport::record_fatal(const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (fatal_.empty()) fatal_ = message;
  }
  done_cv_.notify_all();
}

bool UcxTransport::drained() const {
  return waiting_.empty() && inflight_ == 0 && serving_ == 0 && responses_.empty() &&
         (pusher_ == nullptr || pusher_->idle()) &&
         rndv_receives_.empty();
}

void UcxTransport::start_flush() {
  flush_started_ = true;
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.send = &UcxCallbacks::on_flushed;
  p.user_data = this;
  ucs_status_ptr_t st = ucp_worker_flush_nbx(wrk(worker_), &p);
  if (UCS_PTR_IS_PTR(st)) return;  // UcxCallbacks::on_flushed
  if (UCS_PTR_IS_ERR(st)) {
    spdlog::warn("rank {}: UCX transport shutdown: flushing the endpoints failed: {}", rank_,
                 ucs_status_string(UCS_PTR_STATUS(st)));
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    flushed_ = true;
  }
  done_cv_.notify_all();
}

void UcxCallbacks::on_flushed(void* request, ucs_status_t status, void* user_data) {
  auto* t = static_cast<UcxTransport*>(user_data);
  if (status != UCS_OK) {
    spdlog::warn("rank {}: UCX transport shutdown: flushing the endpoints failed: {}", t->rank_,
                 ucs_status_string(status));
  }
  {
    std::lock_guard<std::mutex> lock(t->mutex_);
    t->flushed_ = true;
  }
  t->done_cv_.notify_all();
  ucp_request_free(request);
}

void UcxTransport::progress_loop() {
  auto* worker = wrk(worker_);
  using Clock = std::chrono::steady_clock;
  const auto busy_poll = std::chrono::microseconds(busy_poll_us_);
  auto last_event = Clock::now();
  for (;;) {
    bool stopping = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      while (!queue_.empty()) {
        waiting_.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      stopping = stop_;
      if (abandon_ || exit_) break;
    }
    bool active = false;
    // Takes the next operation of `from`, owned while UCX holds it, counted in `counter`.
    const auto issue_next = [&](std::deque<std::unique_ptr<Op>>& from, std::int64_t& counter) {
      std::unique_ptr<Op> op = std::move(from.front());
      from.pop_front();
      Op* raw = op.get();
      inflight_ops_.emplace(raw, std::move(op));
      ++counter;
      issue(*raw);
      active = true;
    };
    while (!waiting_.empty() && inflight_ < options_.max_inflight) issue_next(waiting_, inflight_);
    while (ucp_worker_progress(worker) != 0) active = true;
    // The slot protocol: serve posted slots (adds, acks), copy and post our own pushes.
    const bool slot_work = progress_slots();
    active = slot_work || active;
    // Gather responses are not limited by max_inflight: each client bounds its own requests.
    while (!responses_.empty()) issue_next(responses_, serving_);
    if (stopping && !flush_started_ && drained()) start_flush();
    if (slot_work || (!waiting_.empty() && inflight_ < options_.max_inflight)) continue;
    // Over the network, keep progressing for a short while after the last event: the next
    // message of a transfer usually arrives sooner than a sleep and wake-up would take.
    if (busy_poll_us_ > 0) {
      const auto now = Clock::now();
      if (active) last_event = now;
      if (now - last_event < busy_poll) continue;
      if (waiters_.load(std::memory_order_relaxed) > 0) {
        std::this_thread::yield();  // a compute thread waits for us: its core is free
        continue;
      }
    }
    // Sleep until the network or the compute thread has something for us. Arm fails with BUSY
    // when events are pending; then progress again.
    if (ucp_worker_arm(worker) == UCS_ERR_BUSY) continue;
    pollfd fds[2] = {{worker_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    // With operations in flight, wake up soon anyway: a safety net should a transport not signal
    // all of its progress on the event fd. Over TCP it does not (about one sleep in ten with
    // transfers in flight ran into the timeout), so there the net is 50 us instead of 1 ms.
    const bool outstanding = inflight_ > 0 || serving_ > 0 || !rndv_receives_.empty() || flush_started_ ||
                             (pusher_ != nullptr && !pusher_->idle());
    timespec timeout{0, 100'000'000};
    if (outstanding) timeout.tv_nsec = busy_poll_us_ > 0 ? kNetworkSafetyNetNs : 1'000'000;
    ppoll(fds, 2, &timeout, nullptr);
    if (fds[1].revents & POLLIN) {
      std::uint64_t value = 0;
      [[maybe_unused]] const auto n = read(wake_fd_, &value, sizeof(value));
    }
    last_event = Clock::now();  // woken: something is probably coming
  }
}

}  // namespace odc::distributed
