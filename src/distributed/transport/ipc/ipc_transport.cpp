// IpcTransport (ipc_transport.h): set-up, the compute thread's gathers and push jobs, and the
// progress thread's serve and push loops.
#include "odc/distributed/transport/ipc/ipc_transport.h"

#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "odc/core/error.h"
#include "odc/distributed/group/shared_segment.h"
#include "odc/distributed/transport/ipc/ipc_buffers.h"

namespace odc::distributed {

namespace {
std::string host_name() {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  return host;
}

// The accumulator's adds as work on a PeerMemory's lanes: a chunk's add on the accumulate lane
// (the progress thread's), zeroing and the fold on the compute lane (the minibatch boundaries).
class LaneAccumulatorMemory final : public AccumulatorMemory {
 public:
  explicit LaneAccumulatorMemory(PeerMemory& memory) : memory_(memory) {}
  void zero(float* dst, std::int64_t n) override {
    memory_.zero(Lane::compute, dst, static_cast<std::size_t>(n) * sizeof(float));
  }
  void add(float* acc, const float* in, std::int64_t n) override { memory_.add(Lane::accumulate, acc, in, n); }
  void fold(float* acc, const float* in, std::int64_t n) override { memory_.add(Lane::compute, acc, in, n); }
  bool host_visible() const override { return memory_.device().kind == DeviceKind::cpu; }

 private:
  PeerMemory& memory_;
};

// Every rank's `mine`, in rank order, on every rank.
std::vector<nlohmann::json> all_gather_json(HostGroup& group, const nlohmann::json& mine, std::string_view what) {
  std::vector<nlohmann::json> out;
  for (const auto& text : group.all_gather_text(mine.dump(), what)) out.push_back(nlohmann::json::parse(text));
  return out;
}
}  // namespace

IpcTransport::IpcTransport(std::unique_ptr<PeerMemory> memory, HostGroup& group, const IpcShape& shape,
                           const TransportOptions& options, backend::Backend* device)
    : memory_(std::move(memory)),
      slots_(options.max_inflight),
      timeout_s_(options.timeout_s),
      rank_(group.rank()),
      world_(group.size()),
      owned_(shape.owned),
      own_masters_(shape.masters) {
  options.validate(static_cast<std::int64_t>(sizeof(float)));  // a slot holds whole floats
  ODC_CHECK(shape.gather_buffers >= 1 && options.push_buffers >= 1, "the ipc transport needs its buffer counts");
  slot_floats_ = ipc_slot_floats(options, shape.largest_shard);  // as the memory plan sizes it
  const auto w = static_cast<std::size_t>(world_);

  // This rank's exported regions: the data slots its clients write, the bf16 shadow of its masters.
  nlohmann::json mine = {{"host", host_name()}, {"pid", ::getpid()}, {"masters", shape.master_handle},
                         {"transport", std::string(memory_->name())}};
  std::string handle;
  const auto slot_bytes = static_cast<std::size_t>(slot_floats_) * sizeof(float) * w * slots_;
  auto* own_slots = static_cast<float*>(memory_->export_region(slot_bytes, "the gradient data slots", handle));
  mine["slots"] = handle;
  exported_bytes_ = static_cast<std::int64_t>(slot_bytes + static_cast<std::size_t>(owned_) * sizeof(float));
  if (shape.bf16_gathers) {
    own_shadow_ = static_cast<std::uint16_t*>(
        memory_->export_region(static_cast<std::size_t>(owned_) * 2, "the bf16 shadow of the masters", handle));
    mine["shadow"] = handle;
    exported_bytes_ += owned_ * 2;
  }
  const auto peers = all_gather_json(group, mine, "the IPC transport's handle exchange");
  std::vector<std::string> elsewhere;
  for (int r = 0; r < world_; ++r) {
    const auto& p = peers[static_cast<std::size_t>(r)];
    if (p.at("host") != mine.at("host")) elsewhere.push_back(fmt::format("rank {} on {}", r, p.at("host").get<std::string>()));
    if (p.at("transport") != mine.at("transport")) {
      fail("rank {} uses the {} transport, rank {} the {} one: every rank of an IPC job must hold its state alike",
           rank_, mine.at("transport").get<std::string>(), r, p.at("transport").get<std::string>());
    }
  }
  if (!elsewhere.empty()) {
    fail("comm.transport ipc needs every rank on one host; rank {} runs on {}, but {}", rank_,
         mine.at("host").get<std::string>(), fmt::join(elsewhere, ", "));
  }
  masters_.resize(w);
  shadows_.assign(w, nullptr);
  slots_of_.resize(w);
  for (int r = 0; r < world_; ++r) {
    const auto& p = peers[static_cast<std::size_t>(r)];
    const auto i = static_cast<std::size_t>(r);
    if (r == rank_) {
      masters_[i] = own_masters_;
      shadows_[i] = own_shadow_;
      slots_of_[i] = own_slots;
      continue;
    }
    const std::string who = fmt::format("rank {}'s", r);
    masters_[i] = static_cast<const float*>(memory_->open(p.at("masters").get<std::string>(), who + " master shards"));
    slots_of_[i] = static_cast<float*>(memory_->open(p.at("slots").get<std::string>(), who + " gradient data slots"));
    if (own_shadow_ != nullptr) {
      shadows_[i] = static_cast<const std::uint16_t*>(memory_->open(p.at("shadow").get<std::string>(), who + " bf16 shadow"));
    }
  }
  std::string prefix = group.is_root() ? unique_segment_prefix() : std::string();
  group.broadcast(prefix, "the IPC transport's mailbox name");
  mailbox_ = std::make_unique<PeerMailbox>(group, prefix, slots_);
  group.barrier("the IPC transport's regions mapped");
  memory_->all_opened();

  compute_mark_ = memory_->make_mark();
  for (int i = 0; i < shape.gather_buffers; ++i) gather_marks_.push_back(memory_->make_mark());
  if (own_shadow_ != nullptr) {
    // bf16 gathers land here before they are widened into the fp32 unit buffer.
    for (int i = 0; i < shape.gather_buffers; ++i) {
      if (device != nullptr && device->device().kind != DeviceKind::cpu) {
        gather_staging_.emplace_back(device->memory(), DType::bf16);
        staging_.push_back(static_cast<std::uint16_t*>(gather_staging_.back().get(shape.largest_unit).data));
      } else {
        host_staging_.emplace_back(static_cast<std::size_t>(shape.largest_unit));
        staging_.push_back(host_staging_.back().data());
      }
      staging_bytes_ += shape.largest_unit * 2;
    }
  }
  if (shape.deterministic) {
    client_acc_ = static_cast<float*>(memory_->export_region(static_cast<std::size_t>(owned_) * sizeof(float) * w,
                                                            "the per-client accumulators", handle));
  }
  lanes_ = std::make_unique<LaneAccumulatorMemory>(*memory_);
  SlotGeometry geometry;
  geometry.rank = rank_;
  geometry.world = world_;
  geometry.slots = slots_;
  geometry.slot_floats = slot_floats_;
  geometry.timeout_s = timeout_s_;
  geometry.address = [this](int owner, int client, int slot) { return data_slot(owner, client, slot); };
  pusher_ = std::make_unique<SlotPusher>(*memory_, *mailbox_, geometry, options.push_buffers);
  server_ = std::make_unique<SlotServer>(*memory_, *mailbox_, geometry);
}

IpcTransport::~IpcTransport() { stop_progress(); }

void IpcTransport::set_handlers(Handlers handlers) {
  ODC_CHECK(!progress_.joinable(), "the ipc transport's handlers are set once");
  handlers_ = std::move(handlers);
  progress_ = std::thread([this] { progress_loop(); });
}

void IpcTransport::detach() { stop_progress(); }

void IpcTransport::stop_progress() {
  {
    const std::lock_guard lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  if (progress_.joinable()) progress_.join();
  // Copies and adds still queued read and write the regions (and the handlers' accumulators): let
  // them finish before they go.
  try {
    for (Lane lane : {Lane::gather, Lane::push, Lane::accumulate}) memory_->synchronize(lane);
  } catch (const std::exception&) {  // a failed device: nothing left to protect
  }
}

PlannedMemory IpcTransport::allocated() const {
  PlannedMemory m;
  m.add("gradient slots", slot_floats_ * 4 * world_ * slots_, "allocated");
  if (own_shadow_ != nullptr) m.add("bf16 shadow of the masters", owned_ * 2, "allocated");
  m.add("bf16 gather staging", staging_bytes_, "allocated");
  if (client_acc_ != nullptr) m.add("per-client accumulators", owned_ * 4 * world_, "allocated");
  return m;
}

TransportResources IpcTransport::resources() const {
  TransportResources r;
  r.registered_bytes = exported_bytes_;
  r.endpoints = world_ - 1;
  clockid_t clock{};
  if (progress_.joinable() && pthread_getcpuclockid(const_cast<std::thread&>(progress_).native_handle(), &clock) == 0) {
    timespec ts{};
    if (clock_gettime(clock, &ts) == 0) r.thread_cpu_s = static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
  return r;
}

float* IpcTransport::data_slot(int owner, int client, int slot) const {
  return slots_of_[static_cast<std::size_t>(owner)] +
         (static_cast<std::int64_t>(client) * slots_ + slot) * slot_floats_;
}

std::string IpcTransport::describe_peer(int rank) const { return mailbox_->describe(rank); }

void IpcTransport::rethrow_failure() const {
  const std::lock_guard lock(mutex_);
  if (failure_) std::rethrow_exception(failure_);
}

void IpcTransport::check_failure(std::string_view) { rethrow_failure(); }

void IpcTransport::masters_changed() {
  if (own_shadow_ != nullptr) memory_->narrow(Lane::compute, own_shadow_, own_masters_, owned_);
  // The optimizer step, the shadows and the zeroed accumulators are complete before any peer
  // reads a master or pushes a chunk.
  memory_->synchronize(Lane::compute);
}

// ---- gathers (compute thread) ----

void IpcTransport::start_gather(int buffer, std::span<const ShardPiece> pieces, float* full, std::int64_t padded) {
  rethrow_failure();
  const auto b = static_cast<std::size_t>(buffer);
  // The buffer's previous users (and the minibatch's start) come before the copies.
  memory_->record(*compute_mark_, Lane::compute);
  memory_->wait_for(Lane::gather, *compute_mark_);
  for (const ShardPiece& piece : pieces) {
    const auto o = static_cast<std::size_t>(piece.peer);
    if (own_shadow_ == nullptr) {
      memory_->copy(Lane::gather, full + piece.at, masters_[o] + piece.offset,
                    static_cast<std::size_t>(piece.count) * sizeof(float));
    } else {
      memory_->copy(Lane::gather, staging_[b] + piece.at, shadows_[o] + piece.offset, static_cast<std::size_t>(piece.count) * 2);
    }
  }
  if (own_shadow_ != nullptr) memory_->widen(Lane::gather, full, staging_[b], padded);
  memory_->record(*gather_marks_[b], Lane::gather);
}

bool IpcTransport::gather_done(int buffer) { return memory_->reached(*gather_marks_[static_cast<std::size_t>(buffer)]); }

void IpcTransport::wait_gather(int buffer, const std::string&) {
  memory_->wait_for(Lane::compute, *gather_marks_[static_cast<std::size_t>(buffer)]);
}

void IpcTransport::finish_gathers() { memory_->synchronize(Lane::gather); }

// ---- pushes (the compute thread hands a job to the progress thread) ----

void IpcTransport::start_push(int buffer, int unit, std::int32_t sequence, std::span<const ShardPiece> pieces,
                              const float* full, std::vector<std::int64_t>& chunks) {
  rethrow_failure();
  pusher_->submit(buffer, unit, sequence, pieces, full, chunks);
  {
    const std::lock_guard lock(mutex_);
    kicked_ = true;
  }
  changed_.notify_all();
}

bool IpcTransport::push_done(int buffer) { return pusher_->done(buffer); }

void IpcTransport::wait_push(int buffer, const std::string& what) { pusher_->wait(buffer, what); }

// ---- the progress thread ----

void IpcTransport::progress_loop() {
  memory_->enter_thread();
  int idle = 0;
  while (true) {
    bool worked = false;
    try {
      worked = serving_.load() && server_->serve(handlers_);
      worked = pusher_->advance() || worked;
    } catch (...) {
      {
        const std::lock_guard lock(mutex_);
        if (!failure_) failure_ = std::current_exception();
      }
      pusher_->fail(std::current_exception());
      changed_.notify_all();
      return;
    }
    std::unique_lock lock(mutex_);
    if (stop_) return;
    if (worked || kicked_) {
      kicked_ = false;
      idle = 0;
      continue;
    }
    // Idle: back off from 20 us to 1 ms; a new job wakes the thread at once.
    idle = std::min(idle + 1, 6);
    changed_.wait_for(lock, std::chrono::microseconds(20 << (idle - 1 < 0 ? 0 : idle - 1)));
  }
}

}  // namespace odc::distributed
