#pragma once
// What one cuDNN attention (kernels/cuda_cudnn_attention.h) holds, and the order it is torn down
// in: the cuDNN handle, the graphs whose execution plans were finalised with that handle, and the
// batch's device tables. cuDNN's own samples destroy the graphs before the handle; here the
// members' declaration order says it (C++ destroys members in reverse order of declaration), so
// no destructor body can get it wrong. Templates, so that cudnn_attention.cu composes the real
// cuDNN types and tests/unit/kernels/test_cudnn_lifetime.cpp the same templates over fakes that
// record the order. C++17: the CUDA sources include it.
#include <utility>

namespace odc::kernels {

// Owns one library handle: created by Api::create() on the first get(), destroyed by
// Api::destroy() with the owner (never when it was never created). Api::Handle is a pointer-like
// type whose value-initialized state means "none".
template <typename Api>
class LazyHandle {
 public:
  using Handle = typename Api::Handle;

  LazyHandle() = default;
  ~LazyHandle() {
    if (handle_ != Handle{}) Api::destroy(handle_);
  }
  LazyHandle(const LazyHandle&) = delete;
  LazyHandle& operator=(const LazyHandle&) = delete;

  // Api::create() may throw; nothing is owned then and the next get() tries again.
  Handle get() {
    if (handle_ == Handle{}) handle_ = Api::create();
    return handle_;
  }

 private:
  Handle handle_{};
};

// The parts of one attention object. `handle` is declared first so that it is destroyed last:
// after `batch` and after `graphs`, whose plans were built with it. Graphs is constructed from
// the constructor's arguments; HandleOwner and Batch by default.
template <typename HandleOwner, typename Graphs, typename Batch>
struct CudnnParts {
  template <typename... GraphArgs>
  explicit CudnnParts(GraphArgs&&... graph_args) : graphs(std::forward<GraphArgs>(graph_args)...) {}

  HandleOwner handle;  // first: destroyed last
  Graphs graphs;       // execution plans finalised with `handle`
  Batch batch;         // device tables the graphs read
};

}  // namespace odc::kernels
