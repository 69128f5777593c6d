#include "odc/distributed/transport/ucx/ucx_transport.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <ucp/api/ucp.h>

#include "odc/core/error.h"
#include "odc/distributed/transport/ucx/ucx_buffers.h"
#include "ucx_internal.h"

namespace odc::distributed {

using detail::check_ucs;
using detail::ctx;
using detail::wrk;

namespace {

// Over the network (a peer whose region is not mapped here), the progress thread keeps
// progressing this long after its last event before it sleeps: over TCP each sleep and wake-up
// costs more than the gap between the messages of a transfer.
constexpr int kNetworkBusyPollUs = 200;

// Every rank's bytes, in rank order (UCX's packed addresses and keys are binary: hex over the
// group's text exchange, which carries text only).
std::vector<std::string> all_gather_bytes(HostGroup& group, const void* data, std::size_t size, std::string_view what) {
  static constexpr char kHex[] = "0123456789abcdef";
  const auto* bytes = static_cast<const unsigned char*>(data);
  std::string text(2 * size, '0');
  for (std::size_t i = 0; i < size; ++i) {
    text[2 * i] = kHex[bytes[i] >> 4];
    text[2 * i + 1] = kHex[bytes[i] & 15];
  }
  std::vector<std::string> all = group.all_gather_text(text, what);
  for (auto& t : all) {
    if (t.size() % 2 != 0) fail("UCX transport: a malformed {} ({} hex digits)", what, t.size());
    std::string raw(t.size() / 2, '\0');
    const auto digit = [&](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      fail("UCX transport: a malformed {} (character '{}')", what, c);
    };
    for (std::size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<char>(digit(t[2 * i]) * 16 + digit(t[2 * i + 1]));
    t = std::move(raw);
  }
  return all;
}

// A collective step of the shutdown, from a destructor: a failure is logged, not thrown.
void shutdown_barrier(HostGroup& group, int rank, std::string_view what) {
  try {
    group.barrier(what);
  } catch (const std::exception& e) {
    spdlog::warn("rank {}: UCX transport shutdown: {}", rank, e.what());
  }
}

}  // namespace

Completion::Completion(int world_size)
    : per_peer_(std::make_unique<std::atomic<std::int32_t>[]>(static_cast<std::size_t>(world_size))),
      world_size_(world_size) {
  for (int i = 0; i < world_size; ++i) per_peer_[static_cast<std::size_t>(i)].store(0);
}

UcxTransport::UcxTransport(HostGroup& group, std::int64_t exposed_floats, TransportOptions options)
    : group_(group), rank_(group.rank()), world_size_(group.size()), options_(options),
      exposed_floats_(exposed_floats), control_completion_(group.size()), serve_completion_(group.size()) {
  options_.validate();

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
  const std::int64_t slot_region = ucx_slot_region_floats(options_, world_size_);  // as the memory plan sizes it
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
  const auto addresses = all_gather_bytes(group_, address, address_length, "the UCX worker address exchange");
  ucp_worker_release_address(worker, address);
  void* rkey_buffer = nullptr;
  std::size_t rkey_size = 0;
  check_ucs(ucp_rkey_pack(context, memh, &rkey_buffer, &rkey_size), "rkey pack");
  const auto rkeys = all_gather_bytes(group_, rkey_buffer, rkey_size, "the UCX remote key exchange");
  ucp_rkey_buffer_release(rkey_buffer);
  const auto base = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(exposed_));
  remote_bases_.clear();
  for (const auto& text : group_.all_gather_text(std::to_string(base), "the UCX region address exchange")) {
    remote_bases_.push_back(std::stoull(text));
  }

  for (int r = 0; r < world_size_; ++r) {
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep.address = reinterpret_cast<const ucp_address_t*>(addresses[static_cast<std::size_t>(r)].data());
    ucp_ep_h handle = nullptr;
    check_ucs(ucp_ep_create(worker, &ep, &handle), "endpoint create");
    endpoints_.push_back(handle);
    ++endpoints_created_;
    ucp_rkey_h rkey = nullptr;
    check_ucs(ucp_ep_rkey_unpack(handle, rkeys[static_cast<std::size_t>(r)].data(), &rkey), "rkey unpack");
    rkeys_.push_back(rkey);
    // Where the transport maps the peer's region into our address space (shared memory), a get
    // is a plain copy by the calling thread: no hand-off to the progress thread, and still no
    // action of the owner (the paper's intra-node path: loads from peer memory).
    // Our own region is in our address space whatever UCX says.
    void* direct = nullptr;
    if (r == rank_) {
      direct = exposed_;
    } else if (ucp_rkey_ptr(rkey, remote_bases_[static_cast<std::size_t>(r)], &direct) != UCS_OK) {
      direct = nullptr;
    }
    mappable_.push_back(direct != nullptr);
    direct_.push_back(options_.direct_load ? static_cast<const float*>(direct) : nullptr);
    if (direct == nullptr) busy_poll_us_ = kNetworkBusyPollUs;
  }
  set_gather_protocol(options_.gather_protocol);
  if (rank_ == 0) {
    int requests = 0;
    for (const auto protocol : gather_protocols_) requests += protocol == GatherProtocol::request ? 1 : 0;
    spdlog::debug("UCX transport: comm.gather_protocol {}: rank 0 gathers from {} of {} rank(s) by request, the "
                 "others by get", gather_protocol_name(options_.gather_protocol), requests, world_size_);
  }

  ucp_am_handler_param_t hp{};
  hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS | UCP_AM_HANDLER_PARAM_FIELD_CB |
                  UCP_AM_HANDLER_PARAM_FIELD_ARG;
  hp.flags = UCP_AM_FLAG_WHOLE_MSG;
  hp.arg = this;
  const std::pair<unsigned, ucp_am_recv_callback_t> handlers[] = {
      {detail::kPushAmId, &UcxCallbacks::on_push},
      {detail::kAckAmId, &UcxCallbacks::on_ack},
      {detail::kGatherRequestAmId, &UcxCallbacks::on_gather_request},
      {detail::kGatherResponseAmId, &UcxCallbacks::on_gather_response}};
  for (const auto& [id, callback] : handlers) {
    hp.id = id;
    hp.cb = callback;
    check_ucs(ucp_worker_set_am_recv_handler(worker, &hp), "AM handler");
  }
  slot_busy_ = std::make_unique<std::atomic<bool>[]>(static_cast<std::size_t>(world_size_ * options_.slots_per_client));
  for (int i = 0; i < world_size_ * options_.slots_per_client; ++i) slot_busy_[static_cast<std::size_t>(i)].store(false);
  slot_posted_.resize(static_cast<std::size_t>(world_size_));
  if (options_.slot_floats > 0) {
    host_lanes_ = make_host_peer_memory(std::string(), rank_);  // exports nothing: its lanes only
    slots_ = std::make_unique<Slots>(*this);
    SlotGeometry geometry;
    geometry.rank = rank_;
    geometry.world = world_size_;
    geometry.slots = options_.slots_per_client;
    geometry.slot_floats = options_.slot_floats;
    geometry.timeout_s = options_.timeout_s;
    geometry.address = [this](int owner, int client, int slot) {
      return slot_at(owner == rank_ ? exposed_ : const_cast<float*>(direct_[static_cast<std::size_t>(owner)]), client,
                     slot);
    };
    pusher_ = std::make_unique<SlotPusher>(*host_lanes_, *slots_, geometry, std::max(1, options_.push_buffers));
    server_ = std::make_unique<SlotServer>(*host_lanes_, *slots_, geometry);
  }

  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) fail("eventfd failed: {}", std::strerror(errno));
  progress_ = std::thread([this] { progress_loop(); });
  // Every rank's endpoints and progress thread exist before any traffic.
  group_.barrier("the UCX transport's start");
}

UcxTransport::~UcxTransport() {
  // Unwinding from an error: peers may be gone or stuck, so no collective shutdown; the process
  // is about to exit (MPI_Abort for multi-rank jobs).
  const bool unwinding = std::uncaught_exceptions() > 0;
  // Nobody reads our memory, asks us for it or pushes to us any more.
  if (!unwinding) shutdown_barrier(group_, rank_, "the UCX transport's shutdown (idle)");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    abandon_ = unwinding;  // operations to a peer that is gone never complete: do not wait for them
  }
  wake();
  if (!unwinding) {
    // The progress thread drains our operations and flushes the worker; every rank's progress
    // thread keeps running until all are flushed (a flush may need the peer's progress).
    std::unique_lock<std::mutex> lock(mutex_);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(options_.timeout_s);
    if (!done_cv_.wait_until(lock, deadline, [&] { return flushed_ || !fatal_.empty(); })) {
      spdlog::warn("rank {}: UCX transport shutdown: endpoints not flushed after comm.timeout_s = {} s; closing "
                   "them anyway", rank_, options_.timeout_s);
    }
  }
  if (!unwinding) shutdown_barrier(group_, rank_, "the UCX transport's shutdown (flushed)");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    exit_ = true;
  }
  wake();
  if (progress_.joinable()) progress_.join();
  if (unwinding) return;
  for (auto* rkey : rkeys_) ucp_rkey_destroy(static_cast<ucp_rkey_h>(rkey));
  // Everything is flushed: a forced close loses nothing and waits for no peer.
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
  shutdown_barrier(group_, rank_, "the UCX transport's shutdown (closed)");
  ucp_mem_unmap(ctx(context_), static_cast<ucp_mem_h>(memh_));
  ucp_worker_destroy(wrk(worker_));
  ucp_cleanup(ctx(context_));
  close(wake_fd_);
}

void UcxTransport::set_receiver(Receiver receiver) {
  std::lock_guard<std::mutex> lock(mutex_);
  receiver_ = std::move(receiver);
}

void UcxTransport::set_gather_protocol(GatherProtocol protocol) {
  options_.gather_protocol = protocol;
  gather_protocols_.clear();
  for (int r = 0; r < world_size_; ++r) {
    // auto: gets where UCX reaches the region through shared memory (a copy, or a get UCX serves
    // without the owner); over the network UCX 1.13 emulates gets in software: ask the owner.
    GatherProtocol resolved = protocol;
    if (resolved == GatherProtocol::automatic) {
      resolved = mappable_[static_cast<std::size_t>(r)] ? GatherProtocol::get : GatherProtocol::request;
    }
    // Our own shard is a copy whatever the protocol, unless comm.direct_load forbids copies.
    if (r == rank_ && options_.direct_load) resolved = GatherProtocol::get;
    gather_protocols_.push_back(resolved);
  }
}

void UcxTransport::wake() {
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto n = write(wake_fd_, &one, sizeof(one));
}

void UcxTransport::get(int peer, std::int64_t offset, float* dest, std::int64_t count, Completion& completion) {
  const bool request = gather_protocols_[static_cast<std::size_t>(peer)] == GatherProtocol::request;
  if (const float* mapped = direct_[static_cast<std::size_t>(peer)]; mapped != nullptr && !request) {
    std::memcpy(dest, mapped + offset, static_cast<std::size_t>(count) * sizeof(float));
    return;
  }
  const std::int64_t chunk = chunk_floats(peer);
  std::lock_guard<std::mutex> lock(mutex_);
  for (std::int64_t done = 0; done < count; done += chunk) {
    auto op = std::make_unique<Op>();
    op->kind = request ? Op::Kind::request : Op::Kind::get;
    op->events = request ? 2 : 1;  // a request: its send and its response
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

std::int64_t UcxTransport::chunk_floats(int peer) const {
  return (mappable_[static_cast<std::size_t>(peer)] ? options_.chunk_bytes : options_.network_chunk_bytes) / static_cast<std::int64_t>(sizeof(float));
}

float* UcxTransport::slot_at(float* region_base, int client, int slot) const {
  return region_base + exposed_floats_ +
         (static_cast<std::int64_t>(client) * options_.slots_per_client + slot) * options_.slot_floats;
}

std::int64_t UcxTransport::push(int peer, std::int32_t tag, std::int64_t offset, const float* src,
                                std::int64_t count, Completion& completion, std::int32_t sequence) {
  const std::int64_t chunk = chunk_floats(peer);
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

}  // namespace odc::distributed
