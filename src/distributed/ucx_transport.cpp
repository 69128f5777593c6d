#include "odc/distributed/ucx_transport.h"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <unordered_map>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <ucp/api/ucp.h>

#include "odc/core/error.h"

namespace odc::distributed {

namespace {

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

constexpr unsigned kPushAmId = 7;
constexpr unsigned kAckAmId = 8;

void check_ucs(ucs_status_t status, const char* what) {
  if (status != UCS_OK) fail("UCX {} failed: {}", what, ucs_status_string(status));
}

int world_size_of(MPI_Comm comm) {
  int world = 1;
  MPI_Comm_size(comm, &world);
  return world;
}

ucp_context_h ctx(void* p) { return static_cast<ucp_context_h>(p); }
ucp_worker_h wrk(void* p) { return static_cast<ucp_worker_h>(p); }

std::vector<char> allgather_bytes(MPI_Comm comm, const void* data, int size, std::vector<int>& offsets) {
  int world = 1;
  MPI_Comm_size(comm, &world);
  std::vector<int> sizes(static_cast<std::size_t>(world));
  MPI_Allgather(&size, 1, MPI_INT, sizes.data(), 1, MPI_INT, comm);
  offsets.assign(static_cast<std::size_t>(world) + 1, 0);
  for (int r = 0; r < world; ++r) offsets[static_cast<std::size_t>(r) + 1] = offsets[static_cast<std::size_t>(r)] + sizes[static_cast<std::size_t>(r)];
  std::vector<char> all(static_cast<std::size_t>(offsets.back()));
  MPI_Allgatherv(data, size, MPI_BYTE, all.data(), sizes.data(), offsets.data(), MPI_BYTE, comm);
  return all;
}

}  // namespace

struct UcxTransport::Op {
  enum class Kind { get, push, ack } kind = Kind::get;
  UcxTransport* owner = nullptr;
  int peer = 0;
  float* dest = nullptr;
  const float* src = nullptr;
  std::int64_t offset = 0;
  std::int64_t count = 0;
  PushHeader header;
  Completion* completion = nullptr;
};

struct UcxTransport::RecvOp {
  UcxTransport* owner = nullptr;
  PushHeader header;
  std::vector<float> buffer;
};

// UCX callbacks with the library's exact signatures, forwarding to the transport.
struct UcxCallbacks {
  static ucs_status_t on_ack(void* arg, const void* header, std::size_t header_length, void* /*data*/,
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

  static void on_send(void* request, ucs_status_t status, void* user_data) {
    auto* op = static_cast<UcxTransport::Op*>(user_data);
    op->owner->finish(op, status);
    ucp_request_free(request);
  }
  static void on_recv_data(void* request, ucs_status_t status, std::size_t /*length*/, void* user_data) {
    auto* recv = static_cast<UcxTransport::RecvOp*>(user_data);
    UcxTransport* t = recv->owner;
    if (status == UCS_OK) {
      t->deliver(recv->header, recv->buffer.data());
    } else {
      t->record_fatal(fmt::format("receiving a gradient push from rank {} failed: {}", recv->header.from,
                                  ucs_status_string(status)));
    }
    t->rndv_receives_.erase(recv);
    ucp_request_free(request);
  }
  static ucs_status_t on_am(void* arg, const void* header, std::size_t header_length, void* data, std::size_t length,
                            const ucp_am_recv_param_t* param) {
    auto* t = static_cast<UcxTransport*>(arg);
    PushHeader h;
    if (header_length != sizeof(h)) {
      t->record_fatal(fmt::format("malformed push: header of {} bytes", header_length));
      return UCS_OK;
    }
    std::memcpy(&h, header, sizeof(h));
    if (h.slot >= 0) {  // slot protocol: the data is already in our region
      if (h.from < 0 || h.from >= t->world_size_ || h.slot >= t->options_.slots_per_client ||
          h.count > t->options_.slot_floats) {
        t->record_fatal(fmt::format("malformed slot notification from rank {} (slot {}, {} floats)", h.from, h.slot,
                                    h.count));
        return UCS_OK;
      }
      slot_fence(std::memory_order_acquire);
      t->deliver(h, t->slot_at(t->exposed_, h.from, h.slot));
      t->acks_.push_back(h);  // sent from the progress loop, not from inside a callback
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
    recv->buffer.resize(static_cast<std::size_t>(h.count));
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.recv_am = &UcxCallbacks::on_recv_data;
    p.user_data = recv.get();
    ucs_status_ptr_t st = ucp_am_recv_data_nbx(wrk(t->worker_), data, recv->buffer.data(), length, &p);
    if (st == nullptr) {
      t->deliver(h, recv->buffer.data());
    } else if (UCS_PTR_IS_ERR(st)) {
      t->record_fatal(fmt::format("receiving a gradient push from rank {} failed: {}", h.from,
                                  ucs_status_string(UCS_PTR_STATUS(st))));
    } else {
      UcxTransport::RecvOp* key = recv.get();
      t->rndv_receives_.emplace(key, std::move(recv));
    }
    return UCS_OK;
  }
};

Completion::Completion(int world_size)
    : per_peer_(std::make_unique<std::atomic<std::int32_t>[]>(static_cast<std::size_t>(world_size))),
      world_size_(world_size) {
  for (int i = 0; i < world_size; ++i) per_peer_[static_cast<std::size_t>(i)].store(0);
}

UcxTransport::UcxTransport(MPI_Comm comm, std::int64_t exposed_floats, TransportOptions options)
    : comm_(comm), options_(options), exposed_floats_(exposed_floats), ack_completion_(world_size_of(comm)) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &world_size_);
  if (options_.chunk_bytes < 4096) fail("comm.chunk_bytes must be at least 4096, found {}", options_.chunk_bytes);
  if (options_.max_inflight < 1) fail("comm.max_inflight must be at least 1, found {}", options_.max_inflight);
  if (!(options_.timeout_s > 0)) fail("comm.timeout_s must be positive, found {}", options_.timeout_s);
  received_ = std::make_unique<std::atomic<std::int64_t>[]>(static_cast<std::size_t>(world_size_));
  for (int i = 0; i < world_size_; ++i) received_[static_cast<std::size_t>(i)].store(0);

  ucp_config_t* config = nullptr;
  check_ucs(ucp_config_read(nullptr, nullptr, &config), "config read");
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  ucp_context_h context = nullptr;
  const ucs_status_t init_status = ucp_init(&params, config, &context);
  ucp_config_release(config);
  check_ucs(init_status, "init");
  context_ = context;

  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;  // one thread at a time: setup, then the progress thread
  ucp_worker_h worker = nullptr;
  check_ucs(ucp_worker_create(context, &wp, &worker), "worker create");
  worker_ = worker;
  check_ucs(ucp_worker_get_efd(worker, &worker_fd_), "worker event fd");

  // The exposed region: allocated by UCX so that remote gets need no action of ours.
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
  const std::int64_t slot_region = options_.slot_floats * options_.slots_per_client * world_size_;
  mp.length = static_cast<std::size_t>(std::max<std::int64_t>(exposed_floats_ + slot_region, 16)) * sizeof(float);
  mp.flags = UCP_MEM_MAP_ALLOCATE;
  ucp_mem_h memh = nullptr;
  check_ucs(ucp_mem_map(context, &mp, &memh), "mem map");
  memh_ = memh;
  ucp_mem_attr_t attr{};
  attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
  check_ucs(ucp_mem_query(memh, &attr), "mem query");
  exposed_ = static_cast<float*>(attr.address);
  std::memset(exposed_, 0, attr.length);
  registered_bytes_ += static_cast<std::int64_t>(attr.length);

  // Exchange worker addresses, packed remote keys and base addresses.
  ucp_address_t* address = nullptr;
  std::size_t address_length = 0;
  check_ucs(ucp_worker_get_address(worker, &address, &address_length), "worker address");
  std::vector<int> address_offsets;
  const auto addresses = allgather_bytes(comm_, address, static_cast<int>(address_length), address_offsets);
  ucp_worker_release_address(worker, address);
  void* rkey_buffer = nullptr;
  std::size_t rkey_size = 0;
  check_ucs(ucp_rkey_pack(context, memh, &rkey_buffer, &rkey_size), "rkey pack");
  std::vector<int> rkey_offsets;
  const auto rkeys = allgather_bytes(comm_, rkey_buffer, static_cast<int>(rkey_size), rkey_offsets);
  ucp_rkey_buffer_release(rkey_buffer);
  const auto base = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(exposed_));
  remote_bases_.resize(static_cast<std::size_t>(world_size_));
  MPI_Allgather(&base, 1, MPI_UINT64_T, remote_bases_.data(), 1, MPI_UINT64_T, comm_);

  for (int r = 0; r < world_size_; ++r) {
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep.address = reinterpret_cast<const ucp_address_t*>(addresses.data() + address_offsets[static_cast<std::size_t>(r)]);
    ucp_ep_h handle = nullptr;
    check_ucs(ucp_ep_create(worker, &ep, &handle), "endpoint create");
    endpoints_.push_back(handle);
    ++endpoints_created_;
    ucp_rkey_h rkey = nullptr;
    check_ucs(ucp_ep_rkey_unpack(handle, rkeys.data() + rkey_offsets[static_cast<std::size_t>(r)], &rkey), "rkey unpack");
    rkeys_.push_back(rkey);
    // Where the transport maps the peer's region into our address space (shared memory), a get
    // is a plain copy by the calling thread: no hand-off to the progress thread, and still no
    // action of the owner (the paper's intra-node path: loads from peer memory).
    void* direct = nullptr;
    if (options_.direct_load && ucp_rkey_ptr(rkey, remote_bases_[static_cast<std::size_t>(r)], &direct) == UCS_OK) {
      direct_.push_back(static_cast<const float*>(direct));
    } else {
      direct_.push_back(nullptr);
    }
  }

  ucp_am_handler_param_t hp{};
  hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS | UCP_AM_HANDLER_PARAM_FIELD_CB |
                  UCP_AM_HANDLER_PARAM_FIELD_ARG;
  hp.id = kPushAmId;
  hp.flags = UCP_AM_FLAG_WHOLE_MSG;
  hp.cb = &UcxCallbacks::on_am;
  hp.arg = this;
  check_ucs(ucp_worker_set_am_recv_handler(worker, &hp), "AM handler");
  hp.id = kAckAmId;
  hp.cb = &UcxCallbacks::on_ack;
  check_ucs(ucp_worker_set_am_recv_handler(worker, &hp), "AM ack handler");
  slot_busy_ = std::make_unique<std::atomic<bool>[]>(static_cast<std::size_t>(world_size_ * options_.slots_per_client));
  for (int i = 0; i < world_size_ * options_.slots_per_client; ++i) slot_busy_[static_cast<std::size_t>(i)].store(false);
  next_slot_.assign(static_cast<std::size_t>(world_size_), 0);

  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) fail("eventfd failed: {}", std::strerror(errno));
  progress_ = std::thread([this] { progress_loop(); });
  MPI_Barrier(comm_);  // every rank's endpoints and progress thread exist before any traffic
}

UcxTransport::~UcxTransport() {
  // Unwinding from an error: peers may be gone or stuck, so no collective shutdown; the process
  // is about to exit (MPI_Abort for multi-rank jobs).
  const bool unwinding = std::uncaught_exceptions() > 0;
  if (!unwinding) MPI_Barrier(comm_);  // nobody reads our memory or pushes to us any more
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    abandon_ = unwinding;  // operations to a peer that is gone never complete: do not wait for them
  }
  wake();
  if (progress_.joinable()) progress_.join();
  if (unwinding) return;
  for (auto* rkey : rkeys_) ucp_rkey_destroy(static_cast<ucp_rkey_h>(rkey));
  for (auto* ep : endpoints_) {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t req = ucp_ep_close_nbx(static_cast<ucp_ep_h>(ep), &p);
    if (UCS_PTR_IS_PTR(req)) {
      while (ucp_request_check_status(req) == UCS_INPROGRESS) ucp_worker_progress(wrk(worker_));
      ucp_request_free(req);
    }
  }
  MPI_Barrier(comm_);
  ucp_mem_unmap(ctx(context_), static_cast<ucp_mem_h>(memh_));
  ucp_worker_destroy(wrk(worker_));
  ucp_cleanup(ctx(context_));
  close(wake_fd_);
}

void UcxTransport::set_receiver(Receiver receiver) {
  std::lock_guard<std::mutex> lock(mutex_);
  receiver_ = std::move(receiver);
}

void UcxTransport::wake() {
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto n = write(wake_fd_, &one, sizeof(one));
}

void UcxTransport::get(int peer, std::int64_t offset, float* dest, std::int64_t count, Completion& completion) {
  if (const float* mapped = direct_[static_cast<std::size_t>(peer)]) {
    std::memcpy(dest, mapped + offset, static_cast<std::size_t>(count) * sizeof(float));
    return;
  }
  const std::int64_t chunk = options_.chunk_bytes / static_cast<std::int64_t>(sizeof(float));
  std::lock_guard<std::mutex> lock(mutex_);
  for (std::int64_t done = 0; done < count; done += chunk) {
    auto op = std::make_unique<Op>();
    op->kind = Op::Kind::get;
    op->owner = this;
    op->peer = peer;
    op->dest = dest + done;
    op->offset = offset + done;
    op->count = std::min(chunk, count - done);
    op->completion = &completion;
    completion.pending_.fetch_add(1, std::memory_order_relaxed);
    completion.per_peer_[static_cast<std::size_t>(peer)].fetch_add(1, std::memory_order_relaxed);
    queue_.push_back(std::move(op));
  }
  wake();
}

float* UcxTransport::slot_at(float* region_base, int client, int slot) const {
  return region_base + exposed_floats_ +
         (static_cast<std::int64_t>(client) * options_.slots_per_client + slot) * options_.slot_floats;
}

std::int64_t UcxTransport::push(int peer, std::int32_t tag, std::int64_t offset, const float* src,
                                std::int64_t count, Completion& completion, std::int32_t sequence) {
  const float* mapped = direct_[static_cast<std::size_t>(peer)];
  if (mapped != nullptr && count <= options_.slot_floats) {
    // Slot protocol: wait until our next slot at `peer` is acked, fill it, notify.
    const int s = next_slot_[static_cast<std::size_t>(peer)];
    next_slot_[static_cast<std::size_t>(peer)] = (s + 1) % options_.slots_per_client;
    auto& busy = slot_busy_[static_cast<std::size_t>(peer * options_.slots_per_client + s)];
    if (busy.load(std::memory_order_acquire)) {
      std::unique_lock<std::mutex> lock(mutex_);
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(options_.timeout_s);
      while (busy.load(std::memory_order_acquire) && fatal_.empty()) {
        if (done_cv_.wait_until(lock, deadline) == std::cv_status::timeout && busy.load()) {
          fail("rank {}: gradient push to rank {} stalled: its slot {} was not released after comm.timeout_s = {} s "
               "(is that rank alive and making progress?)", rank_, peer, s, options_.timeout_s);
        }
      }
      if (!fatal_.empty()) fail("rank {}: transport failure during a gradient push: {}", rank_, fatal_);
    }
    // The peer's region is mapped here: the slot address is computed from its mapped base.
    float* slot = slot_at(const_cast<float*>(mapped), rank_, s);
    std::memcpy(slot, src, static_cast<std::size_t>(count) * sizeof(float));
    slot_fence(std::memory_order_release);
    busy.store(true, std::memory_order_release);
    auto op = std::make_unique<Op>();
    op->kind = Op::Kind::push;
    op->owner = this;
    op->peer = peer;
    op->src = nullptr;
    op->count = 0;
    op->header = PushHeader{tag, rank_, offset, count, s, sequence};
    op->completion = &completion;
    std::lock_guard<std::mutex> lock(mutex_);
    completion.pending_.fetch_add(1, std::memory_order_relaxed);
    completion.per_peer_[static_cast<std::size_t>(peer)].fetch_add(1, std::memory_order_relaxed);
    queue_.push_back(std::move(op));
    wake();
    return 1;
  }
  const std::int64_t chunk = options_.chunk_bytes / static_cast<std::int64_t>(sizeof(float));
  std::int64_t messages = 0;
  std::lock_guard<std::mutex> lock(mutex_);
  for (std::int64_t done = 0; done < count; done += chunk) {
    auto op = std::make_unique<Op>();
    op->kind = Op::Kind::push;
    op->owner = this;
    op->peer = peer;
    op->src = src + done;
    op->count = std::min(chunk, count - done);
    op->header = PushHeader{tag, rank_, offset + done, op->count, -1, sequence};
    op->completion = &completion;
    completion.pending_.fetch_add(1, std::memory_order_relaxed);
    completion.per_peer_[static_cast<std::size_t>(peer)].fetch_add(1, std::memory_order_relaxed);
    queue_.push_back(std::move(op));
    ++messages;
  }
  wake();
  return messages;
}

void UcxTransport::issue(Op& op) {
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
    st = ucp_am_send_nbx(ep, kPushAmId, &op.header, sizeof(op.header), op.src, bytes, &p);
  } else {
    st = ucp_am_send_nbx(ep, kAckAmId, &op.header, sizeof(op.header), nullptr, 0, &p);
  }
  if (st == nullptr) {
    finish(&op, UCS_OK);
  } else if (UCS_PTR_IS_ERR(st)) {
    finish(&op, UCS_PTR_STATUS(st));
  }
  // Otherwise in flight: UcxCallbacks::on_send finishes it.
}

void UcxTransport::finish(Op* op, int status) {
  Completion& c = *op->completion;
  if (status != UCS_OK) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (c.error_.empty()) {
      c.error_ = fmt::format("{} rank {} failed: {}", op->kind == Op::Kind::get ? "get from" : "push to", op->peer,
                             ucs_status_string(static_cast<ucs_status_t>(status)));
    }
  }
  c.per_peer_[static_cast<std::size_t>(op->peer)].fetch_sub(1, std::memory_order_relaxed);
  const bool last = c.pending_.fetch_sub(1, std::memory_order_acq_rel) == 1;
  --inflight_;
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
  received_[static_cast<std::size_t>(header.from)].fetch_add(1, std::memory_order_acq_rel);
  { std::lock_guard<std::mutex> lock(mutex_); }
  done_cv_.notify_all();
}

void UcxTransport::send_ack(int client, std::int32_t slot) {
  // An ack is an operation like any other (its header must live until UCX is done with it); the
  // header names us, the owner, and the slot the client may reuse.
  auto op = std::make_unique<Op>();
  op->kind = Op::Kind::ack;
  op->owner = this;
  op->peer = client;
  op->header = PushHeader{0, rank_, 0, 0, slot, 0};
  op->completion = &ack_completion_;
  ack_completion_.pending_.fetch_add(1, std::memory_order_relaxed);
  ack_completion_.per_peer_[static_cast<std::size_t>(client)].fetch_add(1, std::memory_order_relaxed);
  Op* raw = op.get();
  inflight_ops_.emplace(raw, std::move(op));
  ++inflight_;
  issue(*raw);
}

void UcxTransport::record_fatal(const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (fatal_.empty()) fatal_ = message;
  }
  done_cv_.notify_all();
}

void UcxTransport::progress_loop() {
  auto* worker = wrk(worker_);
  for (;;) {
    bool stopping = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      while (!queue_.empty()) {
        waiting_.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      stopping = stop_;
      if (abandon_) break;
    }
    while (!waiting_.empty() && inflight_ < options_.max_inflight) {
      std::unique_ptr<Op> op = std::move(waiting_.front());
      waiting_.pop_front();
      Op* raw = op.get();
      inflight_ops_.emplace(raw, std::move(op));
      ++inflight_;
      issue(*raw);
    }
    while (ucp_worker_progress(worker) != 0) {
    }
    while (!acks_.empty()) {
      send_ack(acks_.front().from, acks_.front().slot);
      acks_.pop_front();
    }
    if (stopping && waiting_.empty() && inflight_ == 0) break;
    if (!waiting_.empty() && inflight_ < options_.max_inflight) continue;
    // Sleep until the network or the compute thread has something for us. Arm fails with BUSY
    // when events are pending; then progress again.
    if (ucp_worker_arm(worker) == UCS_ERR_BUSY) continue;
    pollfd fds[2] = {{worker_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    // With operations in flight, wake up at least every millisecond: a safety net should a
    // transport not signal completions on the event fd.
    poll(fds, 2, inflight_ > 0 || !rndv_receives_.empty() ? 1 : 100);
    if (fds[1].revents & POLLIN) {
      std::uint64_t value = 0;
      [[maybe_unused]] const auto n = read(wake_fd_, &value, sizeof(value));
    }
  }
}

}  // namespace odc::distributed
