// The slot protocol's two halves (slot_protocol.h): the client's push jobs and the owner's serve
// loop body, run by the IPC and UCX transports' progress threads.
#include "odc/distributed/transport/slot_protocol.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "odc/core/error.h"

namespace odc::distributed {

namespace {
double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
}  // namespace

std::string SlotSignals::describe(int rank) const { return fmt::format("rank {}", rank); }

// ---- the client's half ----

SlotPusher::SlotPusher(PeerMemory& lanes, SlotSignals& signals, SlotGeometry geometry, int buffers)
    : lanes_(lanes), signals_(signals), geometry_(std::move(geometry)), eager_(lanes.device().kind == DeviceKind::cpu) {
  ODC_CHECK(geometry_.slots >= 1 && geometry_.slot_floats >= 1 && buffers >= 1, "a slot pusher needs slots and buffers");
  const auto w = static_cast<std::size_t>(geometry_.world);
  jobs_.resize(static_cast<std::size_t>(buffers));
  for (auto& job : jobs_) job.ready = lanes_.make_mark();
  copy_marks_.resize(w);
  for (auto& marks : copy_marks_) {
    for (int k = 0; k < geometry_.slots; ++k) marks.push_back(lanes_.make_mark());
  }
  pending_.resize(w);
  next_slot_.assign(w, 0);
  blocked_.assign(w, 0);
}

void SlotPusher::submit(int buffer, int unit, std::int32_t sequence, std::span<const ShardPiece> pieces,
                        const float* full, std::vector<std::int64_t>& chunks) {
  const std::int64_t slot_floats = geometry_.slot_floats;
  const std::lock_guard lock(mutex_);
  if (failure_) std::rethrow_exception(failure_);
  ODC_CHECK(buffer >= 0 && buffer < static_cast<int>(jobs_.size()), "gradient buffer {} of {} pushed", buffer,
            jobs_.size());
  Job& job = jobs_[static_cast<std::size_t>(buffer)];
  ODC_CHECK(job.done, "gradient buffer {} pushed again before its push finished", buffer);
  lanes_.record(*job.ready, Lane::compute);
  job.unit = unit;
  job.sequence = sequence;
  job.chunks.clear();
  for (const ShardPiece& piece : pieces) {
    const float* slice = full + piece.at;
    for (std::int64_t at = 0; at < piece.count; at += slot_floats) {
      job.chunks.push_back({piece.peer, piece.offset + at, std::min(slot_floats, piece.count - at), slice + at});
      ++chunks[static_cast<std::size_t>(piece.peer)];
    }
  }
  job.started = false;
  job.posted = 0;
  job.done = job.chunks.empty();
  job.stalled_since = -1.0;
  if (job.done) return;
  job_order_.push_back(buffer);
  // Host lanes copy at once: the chunks that find a free slot are copied here, on the calling
  // thread, with no hand-off to the progress thread (which only posts them, or copies what had to
  // wait for a slot).
  if (eager_) issue(now_s());
}

bool SlotPusher::done(int buffer) {
  const std::lock_guard lock(mutex_);
  if (failure_) std::rethrow_exception(failure_);
  // A buffer never pushed through slots (beyond the pusher's) has nothing in flight here.
  return buffer >= static_cast<int>(jobs_.size()) || jobs_[static_cast<std::size_t>(buffer)].done;
}

void SlotPusher::wait(int buffer, const std::string& what) {
  std::unique_lock lock(mutex_);
  // The progress thread names a stalled owner after timeout_s; this is the backstop.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(geometry_.timeout_s + 5.0);
  while (buffer < static_cast<int>(jobs_.size()) && !jobs_[static_cast<std::size_t>(buffer)].done && !failure_) {
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout) {
      odc::fail("rank {}: the {} did not finish within {} s", geometry_.rank, what, geometry_.timeout_s);
    }
  }
  if (failure_) std::rethrow_exception(failure_);
}

bool SlotPusher::idle() const {
  const std::lock_guard lock(mutex_);
  return job_order_.empty();
}

void SlotPusher::fail(std::exception_ptr error) {
  {
    const std::lock_guard lock(mutex_);
    if (!failure_) failure_ = std::move(error);
  }
  changed_.notify_all();
}

bool SlotPusher::advance() {
  bool worked = false;
  bool finished = false;
  {
    const std::lock_guard lock(mutex_);
    // Copies that completed are posted, in ring order per owner.
    for (int o = 0; o < geometry_.world; ++o) {
      auto& queue = pending_[static_cast<std::size_t>(o)];
      while (!queue.empty() &&
             lanes_.reached(*copy_marks_[static_cast<std::size_t>(o)][static_cast<std::size_t>(queue.front().slot)])) {
        const Pending p = queue.front();
        queue.pop_front();
        signals_.post(o, p.slot, p.header);
        worked = true;
        Job& job = jobs_[static_cast<std::size_t>(p.job)];
        if (++job.posted == job.chunks.size()) {
          job.done = true;
          job_order_.erase(std::find(job_order_.begin(), job_order_.end(), p.job));
          finished = true;
        }
      }
    }
    if (!job_order_.empty()) worked = issue(now_s()) || worked;
  }
  if (finished) changed_.notify_all();
  return worked;
}

bool SlotPusher::issue(double now) {
  bool worked = false;
  const int slots = geometry_.slots;
  // New copies into free slots: jobs in submission order, each owner's chunks in order.
  std::fill(blocked_.begin(), blocked_.end(), 0);
  for (const int b : job_order_) {
    Job& job = jobs_[static_cast<std::size_t>(b)];
    if (!job.started) {
      lanes_.wait_for(Lane::push, *job.ready);  // the gradient is complete
      job.started = true;
    }
    bool stalled = false;
    for (Chunk& chunk : job.chunks) {
      if (chunk.issued) continue;
      const auto o = static_cast<std::size_t>(chunk.owner);
      if (blocked_[o]) continue;
      const int slot = static_cast<int>(next_slot_[o] % slots);
      const bool in_copy =
          std::any_of(pending_[o].begin(), pending_[o].end(), [&](const Pending& p) { return p.slot == slot; });
      if (in_copy || !signals_.slot_free(chunk.owner, slot)) {
        blocked_[o] = 1;
        stalled = true;
        if (job.stalled_since < 0) job.stalled_since = now;
        if (now - job.stalled_since > geometry_.timeout_s) {
          odc::fail("rank {}: gradient push of unit {} to rank {}: no data slot freed for {:.0f} s (comm.timeout_s): {}",
                    geometry_.rank, job.unit, chunk.owner, now - job.stalled_since, signals_.describe(chunk.owner));
        }
        continue;
      }
      lanes_.copy(Lane::push, geometry_.address(chunk.owner, geometry_.rank, slot), chunk.source,
                  static_cast<std::size_t>(chunk.count) * sizeof(float));
      lanes_.record(*copy_marks_[o][static_cast<std::size_t>(slot)], Lane::push);
      pending_[o].push_back({slot, PushHeader{job.unit, geometry_.rank, chunk.offset, chunk.count, slot, job.sequence}, b});
      ++next_slot_[o];
      chunk.issued = true;
      worked = true;
    }
    if (!stalled) job.stalled_since = -1.0;
    // A stalled owner whose process is gone is named at once, not after the timeout.
    if (stalled && now - job.stalled_since > 1.0) {
      for (int o = 0; o < geometry_.world; ++o) {
        if (blocked_[static_cast<std::size_t>(o)] && signals_.gone(o)) {
          odc::fail("rank {}: gradient push of unit {} to rank {}: {}", geometry_.rank, job.unit, o, signals_.describe(o));
        }
      }
    }
  }
  return worked;
}

// ---- the owner's half ----

SlotServer::SlotServer(PeerMemory& lanes, SlotSignals& signals, SlotGeometry geometry)
    : lanes_(lanes), signals_(signals), geometry_(std::move(geometry)) {
  const auto w = static_cast<std::size_t>(geometry_.world);
  add_marks_.resize(w);
  for (auto& marks : add_marks_) {
    for (int k = 0; k < geometry_.slots; ++k) marks.push_back(lanes_.make_mark());
  }
  head_.assign(w, 0);
  next_.assign(w, 0);
}

bool SlotServer::serve(const OdcTransport::Handlers& handlers) {
  bool worked = false;
  const int slots = geometry_.slots;
  for (int c = 0; c < geometry_.world; ++c) {
    const auto ci = static_cast<std::size_t>(c);
    // Posted chunks are added in the order the client sent them.
    PushHeader h;
    while (next_[ci] - head_[ci] < slots && signals_.posted(c, static_cast<int>(next_[ci] % slots), h)) {
      const int slot = static_cast<int>(next_[ci] % slots);
      // The accumulator validates the rest before it writes; the slot's bound is ours.
      if (h.count <= 0 || h.count > geometry_.slot_floats) {
        odc::fail("rank {}: invalid gradient chunk from rank {} (unit {}, offset {}, count {} in a data slot of {})",
                  geometry_.rank, c, h.tag, h.offset, h.count, geometry_.slot_floats);
      }
      h.from = c;
      h.slot = slot;
      handlers.receive(h, geometry_.address(geometry_.rank, c, slot));
      lanes_.record(*add_marks_[ci][static_cast<std::size_t>(slot)], Lane::accumulate);
      ++next_[ci];
      worked = true;
    }
    // Completed adds free their slots, in ring order.
    std::int64_t applied = 0;
    while (head_[ci] < next_[ci] && lanes_.reached(*add_marks_[ci][static_cast<std::size_t>(head_[ci] % slots)])) {
      signals_.release(c, static_cast<int>(head_[ci] % slots));
      ++head_[ci];
      ++applied;
    }
    if (applied > 0) {
      handlers.applied(c, applied);
      worked = true;
    }
  }
  return worked;
}

}  // namespace odc::distributed
