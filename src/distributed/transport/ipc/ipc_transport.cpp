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

namespace odc::distributed {

namespace {
double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

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
  const std::int64_t chunk_floats = options.chunk_bytes / static_cast<std::int64_t>(sizeof(float));
  if (slots_ < 1 || chunk_floats < 1) {
    fail("the ipc transport needs comm.max_inflight >= 1 (found {}) and comm.chunk_bytes >= 4 (found {})", slots_,
         options.chunk_bytes);
  }
  ODC_CHECK(shape.gather_buffers >= 1 && shape.push_buffers >= 1, "the ipc transport needs its buffer counts");
  slot_floats_ = std::min(chunk_floats, std::max<std::int64_t>(shape.largest_shard, 1));
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
    }
  }
  if (shape.deterministic) {
    client_acc_ = static_cast<float*>(memory_->export_region(static_cast<std::size_t>(owned_) * sizeof(float) * w,
                                                            "the per-client accumulators", handle));
  }
  lanes_ = std::make_unique<LaneAccumulatorMemory>(*memory_);
  jobs_.resize(static_cast<std::size_t>(shape.push_buffers));
  for (auto& job : jobs_) job.ready = memory_->make_mark();
  copy_marks_.resize(w);
  add_marks_.resize(w);
  for (std::size_t r = 0; r < w; ++r) {
    for (int k = 0; k < slots_; ++k) {
      copy_marks_[r].push_back(memory_->make_mark());
      add_marks_[r].push_back(memory_->make_mark());
    }
  }
  pending_.resize(w);
  next_slot_.assign(w, 0);
  served_head_.assign(w, 0);
  served_next_.assign(w, 0);
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

std::string IpcTransport::describe_peer(int rank) const {
  return mailbox_->alive(rank) ? fmt::format("rank {} (pid {}) is alive but not progressing", rank, mailbox_->pid(rank))
                               : fmt::format("rank {} (pid {}) exited", rank, mailbox_->pid(rank));
}

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
  {
    const std::lock_guard lock(mutex_);
    if (failure_) std::rethrow_exception(failure_);
    PushJob& job = jobs_[static_cast<std::size_t>(buffer)];
    ODC_CHECK(job.done, "gradient buffer {} pushed again before its push finished", buffer);
    memory_->record(*job.ready, Lane::compute);
    job.unit = unit;
    job.sequence = sequence;
    job.chunks.clear();
    for (const ShardPiece& piece : pieces) {
      const float* slice = full + piece.at;
      for (std::int64_t at = 0; at < piece.count; at += slot_floats_) {
        job.chunks.push_back({piece.peer, piece.offset + at, std::min(slot_floats_, piece.count - at), slice + at});
        ++chunks[static_cast<std::size_t>(piece.peer)];
      }
    }
    job.started = false;
    job.posted = 0;
    job.done = job.chunks.empty();
    job.stalled_since = -1.0;
    if (!job.done) job_order_.push_back(buffer);
  }
  changed_.notify_all();
}

bool IpcTransport::push_done(int buffer) {
  const std::lock_guard lock(mutex_);
  if (failure_) std::rethrow_exception(failure_);
  return jobs_[static_cast<std::size_t>(buffer)].done;
}

void IpcTransport::wait_push(int buffer, const std::string& what) {
  std::unique_lock lock(mutex_);
  // The progress thread names a stalled owner after timeout_s; this is the backstop.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_ + 5.0);
  while (!jobs_[static_cast<std::size_t>(buffer)].done && !failure_) {
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout) {
      fail("rank {}: the {} did not finish within {} s", rank_, what, timeout_s_);
    }
  }
  if (failure_) std::rethrow_exception(failure_);
}

// ---- the progress thread ----

void IpcTransport::progress_loop() {
  memory_->enter_thread();
  int idle = 0;
  while (true) {
    bool worked = false;
    try {
      worked = serve_incoming();
      worked = advance_pushes() || worked;
    } catch (...) {
      {
        const std::lock_guard lock(mutex_);
        if (!failure_) failure_ = std::current_exception();
      }
      changed_.notify_all();
      return;
    }
    std::unique_lock lock(mutex_);
    if (stop_) return;
    if (worked) {
      idle = 0;
      continue;
    }
    // Idle: back off from 20 us to 1 ms; a new job wakes the thread at once.
    idle = std::min(idle + 1, 6);
    changed_.wait_for(lock, std::chrono::microseconds(20 << (idle - 1 < 0 ? 0 : idle - 1)));
  }
}

bool IpcTransport::serve_incoming() {
  if (!serving_.load()) return false;
  bool worked = false;
  const int slots = slots_;
  for (int c = 0; c < world_; ++c) {
    const auto ci = static_cast<std::size_t>(c);
    // Completed adds free their slots, in ring order.
    std::int64_t applied = 0;
    while (served_head_[ci] < served_next_[ci] &&
           memory_->reached(*add_marks_[ci][static_cast<std::size_t>(served_head_[ci] % slots)])) {
      mailbox_->release(c, static_cast<int>(served_head_[ci] % slots));
      ++served_head_[ci];
      ++applied;
    }
    if (applied > 0) {
      handlers_.applied(c, applied);
      worked = true;
    }
    // Posted chunks are added in the order the client sent them.
    PeerMailbox::Message m;
    while (served_next_[ci] - served_head_[ci] < slots &&
           mailbox_->posted(c, static_cast<int>(served_next_[ci] % slots), m)) {
      const int slot = static_cast<int>(served_next_[ci] % slots);
      // The accumulator validates the rest before it writes; the slot's bound is ours.
      if (m.count <= 0 || m.count > slot_floats_) {
        fail("rank {}: invalid gradient chunk from rank {} (unit {}, offset {}, count {} in a data slot of {})", rank_,
             c, m.unit, m.offset, m.count, slot_floats_);
      }
      handlers_.receive(PushHeader{m.unit, c, m.offset, m.count, slot, m.sequence}, data_slot(rank_, c, slot));
      memory_->record(*add_marks_[ci][static_cast<std::size_t>(slot)], Lane::accumulate);
      ++served_next_[ci];
      worked = true;
    }
  }
  return worked;
}

bool IpcTransport::advance_pushes() {
  bool worked = false;
  const int slots = slots_;
  // Copies that completed are posted, in ring order per owner.
  for (int o = 0; o < world_; ++o) {
    auto& queue = pending_[static_cast<std::size_t>(o)];
    while (!queue.empty() && memory_->reached(*copy_marks_[static_cast<std::size_t>(o)][static_cast<std::size_t>(queue.front().slot)])) {
      const Pending p = queue.front();
      queue.pop_front();
      mailbox_->post(o, p.slot, p.message);
      worked = true;
      bool finished = false;
      {
        const std::lock_guard lock(mutex_);
        PushJob& job = jobs_[static_cast<std::size_t>(p.job)];
        finished = ++job.posted == job.chunks.size();
        if (finished) {
          job.done = true;
          job_order_.erase(std::find(job_order_.begin(), job_order_.end(), p.job));
        }
      }
      if (finished) changed_.notify_all();
    }
  }
  // New copies into free slots: jobs in submission order, each owner's chunks in order.
  std::vector<int> order;
  {
    const std::lock_guard lock(mutex_);
    order.assign(job_order_.begin(), job_order_.end());
  }
  std::vector<char> blocked(static_cast<std::size_t>(world_), 0);
  const double now = now_s();
  for (const int b : order) {
    PushJob& job = jobs_[static_cast<std::size_t>(b)];  // only this thread changes an active job's chunks
    if (!job.started) {
      memory_->wait_for(Lane::push, *job.ready);  // the gradient is complete
      job.started = true;
    }
    bool stalled = false;
    for (Chunk& chunk : job.chunks) {
      if (chunk.issued) continue;
      const auto o = static_cast<std::size_t>(chunk.owner);
      if (blocked[o]) continue;
      const int slot = static_cast<int>(next_slot_[o] % slots);
      const bool in_copy = std::any_of(pending_[o].begin(), pending_[o].end(), [&](const Pending& p) { return p.slot == slot; });
      if (in_copy || !mailbox_->slot_free(chunk.owner, slot)) {
        blocked[o] = 1;
        stalled = true;
        if (job.stalled_since < 0) job.stalled_since = now;
        if (now - job.stalled_since > timeout_s_) {
          fail("rank {}: gradient push of unit {} to rank {}: no data slot freed for {:.0f} s (comm.timeout_s): {}", rank_,
               job.unit, chunk.owner, now - job.stalled_since, describe_peer(chunk.owner));
        }
        continue;
      }
      memory_->copy(Lane::push, data_slot(chunk.owner, rank_, slot), chunk.source,
                   static_cast<std::size_t>(chunk.count) * sizeof(float));
      memory_->record(*copy_marks_[o][static_cast<std::size_t>(slot)], Lane::push);
      pending_[o].push_back({slot, {job.unit, job.sequence, chunk.offset, chunk.count}, b});
      ++next_slot_[o];
      chunk.issued = true;
      worked = true;
    }
    if (!stalled) job.stalled_since = -1.0;
    // A stalled owner whose process is gone is named at once, not after the timeout.
    if (stalled && now - job.stalled_since > 1.0) {
      for (int o = 0; o < world_; ++o) {
        if (blocked[static_cast<std::size_t>(o)] && !mailbox_->alive(o)) {
          fail("rank {}: gradient push of unit {} to rank {}: {}", rank_, job.unit, o, describe_peer(o));
        }
      }
    }
  }
  return worked;
}

}  // namespace odc::distributed
