#pragma once
// PeerMemory on a GPU (peer_memory.h), built with the CUDA backend: regions are cudaMalloc
// allocations on the backend's device exported with CUDA IPC handles (a peer in the same process
// uses the pointer itself: CUDA IPC opens only another process's memory); copies, adds and casts
// run on three streams of the transport's plus the backend's compute stream; marks are events.
// Ranks may share a GPU: CUDA IPC maps another process's allocation on the same device too.
#include <memory>

#include "odc/backend/backend.h"
#include "odc/distributed/transport/ipc/peer_memory.h"

namespace odc::distributed {

// `backend` must run on a CUDA device and offer its stream (Backend::native_stream); it must
// outlive the result.
std::unique_ptr<PeerMemory> make_cuda_peer_memory(backend::Backend& backend);

}  // namespace odc::distributed
