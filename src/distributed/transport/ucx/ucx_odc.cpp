// UcxTransport as the ODC protocol's transport (odc_transport.h): a unit's gather is a get (or
// request gather) of every owner's piece; a gradient's pieces go through the slot protocol to
// owners whose region is mapped here and as message pushes to the others; each unit buffer is
// tracked by a Completion (and the slot pusher's job). Received pushes go to the handlers, each
// counted applied once added (the adds run on the host, on the progress thread).
#include <fmt/format.h>

#include "odc/distributed/transport/ucx/ucx_transport.h"
#include "odc/distributed/transport/ucx/ucx_buffers.h"

namespace odc::distributed {

Completion& UcxTransport::completion(std::vector<std::unique_ptr<Completion>>& of, int buffer) {
  while (of.size() <= static_cast<std::size_t>(buffer)) of.push_back(std::make_unique<Completion>(world_size_));
  return *of[static_cast<std::size_t>(buffer)];
}

void UcxTransport::set_handlers(Handlers handlers) {
  set_receiver([handlers](const PushHeader& header, const float* data) {
    handlers.receive(header, data);
    handlers.applied(header.from, 1);
  });
  const std::lock_guard<std::mutex> lock(handlers_mutex_);
  handlers_ = std::move(handlers);
}

void UcxTransport::detach() {
  set_receiver([](const PushHeader&, const float*) {});
  const std::lock_guard<std::mutex> lock(handlers_mutex_);
  handlers_ = Handlers{};
}

void UcxTransport::start_gather(int buffer, std::span<const ShardPiece> pieces, float* full, std::int64_t) {
  Completion& c = completion(gathers_, buffer);
  for (const ShardPiece& piece : pieces) get(piece.peer, piece.offset, full + piece.at, piece.count, c);
}

bool UcxTransport::gather_done(int buffer) { return completion(gathers_, buffer).done(); }

void UcxTransport::wait_gather(int buffer, const std::string& what) { wait(completion(gathers_, buffer), what); }

void UcxTransport::start_push(int buffer, int unit, std::int32_t sequence, std::span<const ShardPiece> pieces,
                              const float* full, std::vector<std::int64_t>& chunks) {
  Completion& c = completion(pushes_, buffer);
  slot_pieces_.clear();
  for (const ShardPiece& piece : pieces) {
    if (slot_protocol(piece.peer)) {
      slot_pieces_.push_back(piece);
    } else {
      chunks[static_cast<std::size_t>(piece.peer)] +=
          push(piece.peer, unit, piece.offset, full + piece.at, piece.count, c, sequence);
    }
  }
  if (slot_pieces_.empty()) return;
  pusher_->submit(buffer, unit, sequence, slot_pieces_, full, chunks);
  wake();
}

bool UcxTransport::push_done(int buffer) {
  return (pusher_ == nullptr || pusher_->done(buffer)) && completion(pushes_, buffer).done();
}

void UcxTransport::wait_push(int buffer, const std::string& what) {
  if (pusher_ != nullptr) {
    const WaitScope waiting(*this);
    pusher_->wait(buffer, what);
  }
  wait(completion(pushes_, buffer), what);
}

PlannedMemory UcxTransport::allocated() const {
  PlannedMemory m;
  // What it asked UCX to map past the masters (UCX rounds the whole region up: resources()).
  m.add("UCX gradient slots", ucx_slot_region_floats(options_, world_size_) * static_cast<std::int64_t>(sizeof(float)),
        "allocated");
  return m;
}

TransportResources UcxTransport::resources() const {
  return {progress_cpu_seconds(), registered_bytes_, endpoints_created_};
}

}  // namespace odc::distributed
