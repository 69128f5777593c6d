// cuDNN's fused attention over the native kernels' layouts (cuda_cudnn_attention.h): the loader of
// libcudnn, the stats transpose, and (with the cuDNN frontend header, ODC_HAVE_CUDNN_FRONTEND)
// the SDPA graphs, their cache and their execution. The frontend runs in its dynamic-loading mode
// (NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING): every cuDNN call goes through the library this file
// dlopens, so nothing links libcudnn.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "odc/core/error.h"
#include "odc/kernels/cuda_cudnn_attention.h"
#include "elementwise.cuh"

#if defined(ODC_HAVE_CUDNN_FRONTEND)
#ifndef NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#endif
#ifndef CUDNN_FRONTEND_SKIP_JSON_LIB
#define CUDNN_FRONTEND_SKIP_JSON_LIB  // the project has its own nlohmann_json: no second copy
#endif
#include <cstring>  // the frontend's dynamic-loading shim uses std::strlen without including it

#include <cudnn_frontend.h>

#include "cudnn_graphs.h"
#include "odc/kernels/cudnn_lifetime.h"

// The dynamic-loading mode's library handle is defined in cudnn_graphs.cpp (declared by the
// frontend, defined by its user).
#endif

namespace odc::kernels::cuda {
namespace {

// ---- libcudnn, loaded once per process ----

struct CudnnLibrary {
  void* handle = nullptr;
  int version = 0;
  std::string error;
};

const CudnnLibrary& cudnn_library() {
  static const CudnnLibrary library = [] {
    CudnnLibrary lib;
    std::vector<std::string> names;
    if (const char* named = std::getenv("ODC_CUDNN_LIBRARY"); named != nullptr && *named != '\0') {
      names.emplace_back(named);
    } else {
      names = {"libcudnn.so.9", "libcudnn.so"};
    }
    for (const std::string& name : names) {
      dlerror();
      lib.handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (lib.handle != nullptr) break;
      const char* why = dlerror();
      lib.error += (lib.error.empty() ? "" : "; ") + std::string(why != nullptr ? why : name + ": not loadable");
    }
    if (lib.handle == nullptr) return lib;
    using GetVersion = std::size_t (*)();
    const auto get_version = reinterpret_cast<GetVersion>(dlsym(lib.handle, "cudnnGetVersion"));
    if (get_version == nullptr) {
      lib.error = "the loaded cuDNN library has no cudnnGetVersion";
      lib.handle = nullptr;  // left loaded: unloading a half-usable library buys nothing
      return lib;
    }
    lib.version = static_cast<int>(get_version());
    lib.error.clear();
#if defined(ODC_HAVE_CUDNN_FRONTEND)
    cudnn_frontend::cudnn_dlhandle = lib.handle;
#endif
    return lib;
  }();
  return library;
}

// The paths of the libcudart objects loaded in this process, in load order.
std::vector<std::string> loaded_cudart_paths() {
  std::vector<std::string> paths;
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* out) {
        const std::string path = info->dlpi_name != nullptr ? info->dlpi_name : "";
        const std::size_t slash = path.find_last_of('/');
        const std::string file = slash == std::string::npos ? path : path.substr(slash + 1);
        if (file.rfind("libcudart.so", 0) == 0) static_cast<std::vector<std::string>*>(out)->push_back(path);
        return 0;
      },
      &paths);
  return paths;
}

// ---- the stats transpose: dst[c * rows + r] = src[r * cols + c] ----

__global__ void transpose_f32_kernel(const float* src, float* dst, std::int64_t rows, std::int64_t cols) {
  const std::int64_t n = rows * cols;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / cols;
    const std::int64_t c = i - r * cols;
    dst[c * rows + r] = src[i];
  }
}


}  // namespace

bool cudnn_frontend_built() {
#if defined(ODC_HAVE_CUDNN_FRONTEND)
  return true;
#else
  return false;
#endif
}

int cudnn_runtime_version(std::string* why) {
  const CudnnLibrary& lib = cudnn_library();
  if (lib.version == 0 && why != nullptr) *why = lib.error;
  return lib.version;
}

int compute_capability(int device) {
#if defined(ODC_CUDA_EMULATION)
  (void)device;
  return 0;  // the CPU emulator is no device cuDNN runs on
#else
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it for the next check
    return 0;
  }
  return major * 10 + minor;
#endif
}

const CudartChoice& pin_frontend_cudart() {
  static const CudartChoice choice = [] {
#if defined(CUDART_VERSION)
    const int built = CUDART_VERSION;
#else
    const int built = 0;  // the CPU emulator: no CUDA runtime
#endif
    CudartChoice c = choose_frontend_cudart(std::getenv("CUDNN_FRONTEND_CUDART_LIB_NAME"), loaded_cudart_paths(), built);
    if (!c.from_environment) setenv("CUDNN_FRONTEND_CUDART_LIB_NAME", c.name.c_str(), 1);
    return c;
  }();
  return choice;
}

int cuda_runtime_version() {
#if defined(ODC_CUDA_EMULATION)
  return 0;
#else
  int version = 0;
  return cudaRuntimeGetVersion(&version) == cudaSuccess ? version : 0;
#endif
}

void transpose_f32(const float* src, float* dst, std::int64_t rows, std::int64_t cols, void* stream) {
  const std::int64_t n = rows * cols;
  if (n == 0) return;
  transpose_f32_kernel<<<elementwise::blocks_for(n), elementwise::kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      src, dst, rows, cols);
  check_last_launch("transpose_f32_kernel");
}

#if defined(ODC_HAVE_CUDNN_FRONTEND)

namespace {

// The cuDNN handle's life, through the dynamic-loading frontend (LazyHandle's Api).
struct CudnnHandleApi {
  using Handle = cudnnHandle_t;
  static Handle create() {
    std::string why;
    if (cudnn_runtime_version(&why) == 0) {
      fail("model.attention=cudnn: no cuDNN library could be loaded ({}); put libcudnn.so.9 on LD_LIBRARY_PATH "
           "or name it in ODC_CUDNN_LIBRARY, or set model.attention: native",
           why);
    }
    cudnnHandle_t handle = nullptr;
    const cudnnStatus_t status = cudnn_frontend::detail::create_handle(&handle);
    if (status != CUDNN_STATUS_SUCCESS) {
      fail("cuDNN attention: cudnnCreate failed (status {}); set model.attention: native", static_cast<int>(status));
    }
    return handle;
  }
  static void destroy(Handle handle) { cudnn_frontend::detail::destroy_handle(handle); }
};

// The handle, the graphs built with it, the batch tables: torn down in the reverse order
// (cudnn_lifetime.h; tests/unit/kernels/test_cudnn_lifetime.cpp).
using CudnnAttentionParts =
    CudnnParts<LazyHandle<CudnnHandleApi>, cudnn_graphs::GraphCache, cudnn_graphs::RaggedBatch>;

}  // namespace

// Adds behaviour only: what it holds and the order it is torn down in are CudnnAttentionParts'.
struct CudnnAttention::Impl : CudnnAttentionParts {
  using CudnnAttentionParts::CudnnAttentionParts;

  cudnnHandle_t cudnn(void* stream) {
    const cudnnHandle_t h = handle.get();
    const cudnnStatus_t status = cudnn_frontend::detail::set_stream(h, static_cast<cudaStream_t>(stream));
    if (status != CUDNN_STATUS_SUCCESS) {
      fail("cuDNN attention: cudnnSetStream failed (status {})", static_cast<int>(status));
    }
    return h;
  }

  // What a forward or backward call starts from: the batch's tables for `shape` (uploaded when
  // new), the handle on `stream`, the shape class's graph (null: its workspace is over the bound).
  struct Call {
    cudnnHandle_t handle;
    const cudnn_graphs::CachedGraph* graph;
  };
  Call begin(const CudaAttentionShape& shape, bool backward, DeviceAllocator& allocator, void* stream) {
    batch.prepare(shape, allocator, stream);
    const cudnnHandle_t h = cudnn(stream);
    const cudnn_graphs::CachedGraph& graph = graphs.get(batch.key(backward), h);
    return {h, graphs.admit(graph) ? &graph : nullptr};
  }
};

CudnnAttention::CudnnAttention(bool deterministic, std::size_t cache_capacity, std::int64_t workspace_limit)
    : impl_(std::make_unique<Impl>(deterministic, std::max<std::size_t>(cache_capacity, 2), workspace_limit)) {
  static_assert(sizeof(Impl) == sizeof(CudnnAttentionParts), "CudnnAttention::Impl holds nothing beyond its parts");
  // Before any frontend call can load a CUDA runtime of its own (cudnn_runtime.h).
  pin_frontend_cudart();
  // cuDNN's deterministic backward on Hopper defaults to a dP workspace of B * n_heads * S * S * 2
  // bytes over the padded batch (17 GB for one 16k sequence of 32 heads); since cuDNN 9.25 the
  // frontend takes the ordered-dQ engine (workspace linear in the tokens) where that would exceed
  // CUDNN_FRONTEND_ATTN_DP_WORKSPACE_LIMIT. Cap it at 1 GiB unless the environment already says.
  setenv("CUDNN_FRONTEND_ATTN_DP_WORKSPACE_LIMIT", "1073741824", 0);
}
CudnnAttention::~CudnnAttention() = default;

namespace {
// Key segments (context parallelism) are not built into these graphs: Q and K/V share one set of
// ragged offsets and lengths and the diagonal is top-left, which for a query chunk attending to
// the keys before it is the wrong mask. CudaBackend runs such calls on the native kernels; a
// direct caller gets this error rather than a wrong result.
void refuse_key_segments(const CudaAttentionShape& shape, const char* what) {
  if (shape.cu_seqlens_k != nullptr) {
    fail("cuDNN attention {}: key segments (cu_seqlens_k, bottom-right causal diagonal) are not supported by these "
         "graphs; run them on the native attention kernels",
         what);
  }
}
}  // namespace

void CudnnAttention::prepare(const CudaAttentionShape& shape, DeviceAllocator& allocator, void* stream) {
  refuse_key_segments(shape, "prepare");
  impl_->batch.prepare(shape, allocator, stream);
}

bool CudnnAttention::forward(const CudaAttentionShape& shape, const std::uint16_t* q, const std::uint16_t* k,
                             const std::uint16_t* v, std::uint16_t* out, float* lse, DeviceAllocator& allocator,
                             void* stream) {
  refuse_key_segments(shape, "forward");
  if (shape.tokens == 0) return true;
  const Impl::Call call = impl_->begin(shape, false, allocator, stream);
  if (call.graph == nullptr) return false;
  // cuDNN's stats, token-major: transposed into lse after the graph.
  const std::size_t stats_count = static_cast<std::size_t>(shape.tokens) * shape.n_heads;
  DeviceBuffer stats(allocator, stats_count * sizeof(float), stream);
  cudnn_graphs::Pointers p;
  p.q = q;
  p.k = k;
  p.v = v;
  p.o = out;
  p.stats = stats.get();
  impl_->graphs.execute(*call.graph, impl_->batch, p, call.handle, allocator, stream);
  transpose_f32(stats.as<float>(), lse, shape.tokens, shape.n_heads, stream);
  return true;
}

bool CudnnAttention::backward(const CudaAttentionShape& shape, const std::uint16_t* q, const std::uint16_t* k,
                              const std::uint16_t* v, const std::uint16_t* out, const float* lse,
                              const std::uint16_t* dout, std::uint16_t* dq, std::uint16_t* dk, std::uint16_t* dv,
                              DeviceAllocator& allocator, void* stream) {
  refuse_key_segments(shape, "backward");
  if (shape.tokens == 0) return true;
  const Impl::Call call = impl_->begin(shape, true, allocator, stream);
  if (call.graph == nullptr) return false;
  const std::size_t stats_count = static_cast<std::size_t>(shape.tokens) * shape.n_heads;
  DeviceBuffer stats(allocator, stats_count * sizeof(float), stream);
  transpose_f32(lse, stats.as<float>(), shape.n_heads, shape.tokens, stream);
  cudnn_graphs::Pointers p;
  p.q = q;
  p.k = k;
  p.v = v;
  p.o = out;
  p.stats = stats.get();
  p.dout = dout;
  p.dq = dq;
  p.dk = dk;
  p.dv = dv;
  impl_->graphs.execute(*call.graph, impl_->batch, p, call.handle, allocator, stream);
  return true;
}

CudnnAttentionStats CudnnAttention::stats() const { return impl_->graphs.stats(); }
std::string CudnnAttention::refusal() const { return impl_->graphs.refusal(); }

#else  // built without the cuDNN frontend: the queries above work, the attention itself refuses

struct CudnnAttention::Impl {};

namespace {
[[noreturn]] void no_frontend() {
  fail("model.attention=cudnn: this build has no cuDNN attention (built without the cuDNN frontend: "
       "scripts/setup.sh installs it, or point ODC_CUDNN_FRONTEND_INCLUDE at its include directory, then "
       "reconfigure); set model.attention: native or auto");
}
}  // namespace

CudnnAttention::CudnnAttention(bool, std::size_t, std::int64_t) : impl_(std::make_unique<Impl>()) {}
CudnnAttention::~CudnnAttention() = default;
void CudnnAttention::prepare(const CudaAttentionShape&, DeviceAllocator&, void*) { no_frontend(); }
bool CudnnAttention::forward(const CudaAttentionShape&, const std::uint16_t*, const std::uint16_t*,
                             const std::uint16_t*, std::uint16_t*, float*, DeviceAllocator&, void*) {
  no_frontend();
}
bool CudnnAttention::backward(const CudaAttentionShape&, const std::uint16_t*, const std::uint16_t*,
                              const std::uint16_t*, const std::uint16_t*, const float*, const std::uint16_t*,
                              std::uint16_t*, std::uint16_t*, std::uint16_t*, DeviceAllocator&, void*) {
  no_frontend();
}
CudnnAttentionStats CudnnAttention::stats() const { return {}; }
std::string CudnnAttention::refusal() const { return {}; }

#endif

}  // namespace odc::kernels::cuda
