// UcxTransport as the ODC protocol's transport (odc_transport.h): a unit's gather is a get (or
// request gather) of every owner's piece, a gradient push a push of every owner's piece, each
// unit buffer tracked by a Completion; received pushes go to the handlers, each counted applied at
// once (the adds run on the host, on the progress thread).
#include <fmt/format.h>

#include "odc/distributed/transport/ucx/ucx_transport.h"

namespace odc::distributed {

Completion& UcxTransport::completion(std::vector<std::unique_ptr<Completion>>& of, int buffer) {
  while (of.size() <= static_cast<std::size_t>(buffer)) of.push_back(std::make_unique<Completion>(world_size_));
  return *of[static_cast<std::size_t>(buffer)];
}

void UcxTransport::set_handlers(Handlers handlers) {
  set_receiver([handlers = std::move(handlers)](const PushHeader& header, const float* data) {
    handlers.receive(header, data);
    handlers.applied(header.from, 1);
  });
}

void UcxTransport::detach() {
  set_receiver([](const PushHeader&, const float*) {});
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
  for (const ShardPiece& piece : pieces) {
    chunks[static_cast<std::size_t>(piece.peer)] +=
        push(piece.peer, unit, piece.offset, full + piece.at, piece.count, c, sequence);
  }
}

bool UcxTransport::push_done(int buffer) { return completion(pushes_, buffer).done(); }

void UcxTransport::wait_push(int buffer, const std::string& what) { wait(completion(pushes_, buffer), what); }

TransportResources UcxTransport::resources() const {
  return {progress_cpu_seconds(), registered_bytes_, endpoints_created_};
}

}  // namespace odc::distributed
