// cuBLASLt GEMMs (cuda_gemm.h). The row-major -> column-major mapping is documented in the header;
// plan_for() below is the one place that applies it.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "odc/core/error.h"
#include "odc/kernels/cuda_device.h"
#include "odc/kernels/cuda_gemm.h"
#include "column_sums.cuh"
#include "elementwise.cuh"

namespace odc::kernels::cuda {

void check_cublas(int status, const char* what) {
  if (status == static_cast<int>(CUBLAS_STATUS_SUCCESS)) return;
  const auto s = static_cast<cublasStatus_t>(status);
  throw Error(std::string("cuBLASLt call ") + what + " failed: " + cublasLtGetStatusName(s) +
              " (" + cublasLtGetStatusString(s) + ")");
}

namespace gemm_detail {

// A matmul descriptor, the three operand layouts (D shares C's) and the heuristic's algorithm for
// one configuration. `has_algo` false caches "no algorithm" (the bias epilogue's fallback).
struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr;  // cuBLAS's A: our B
  cublasLtMatrixLayout_t b = nullptr;  // cuBLAS's B: our A
  cublasLtMatrixLayout_t c = nullptr;  // C and D
  cublasLtMatmulAlgo_t algo{};
  bool has_algo = false;

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (c != nullptr) cublasLtMatrixLayoutDestroy(c);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (op != nullptr) cublasLtMatmulDescDestroy(op);
  }
};

// (trans_a, trans_b, m, n, k, lda, ldb, ldc, c_type, bias epilogue, alignments of a, b, c, bias).
using PlanKey = std::array<std::int64_t, 14>;

// Distinct configurations are few in training (a handful of layer shapes times the microbatch
// token counts); the cap only guards against unbounded growth with ever-new row counts.
constexpr std::size_t kMaxPlans = 4096;

}  // namespace gemm_detail

struct Blas::Impl {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  std::mutex mutex;
  std::map<gemm_detail::PlanKey, std::unique_ptr<gemm_detail::Plan>> plans;

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() {
    plans.clear();
    if (workspace != nullptr) cudaFree(workspace);
    if (handle != nullptr) cublasLtDestroy(handle);
  }
};

Blas::Blas(std::size_t workspace_bytes) : impl_(std::make_unique<Impl>()) {
  check_cublas(cublasLtCreate(&impl_->handle), "cublasLtCreate");
  if (workspace_bytes > 0) {
    check_cuda(cudaMalloc(&impl_->workspace, workspace_bytes), "cudaMalloc(cuBLASLt workspace)");
  }
  impl_->workspace_bytes = workspace_bytes;
}

Blas::~Blas() = default;
Blas::Blas(Blas&&) noexcept = default;
Blas& Blas::operator=(Blas&&) noexcept = default;

std::size_t Blas::workspace_bytes() const { return impl_->workspace_bytes; }

std::size_t Blas::cached_plans() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->plans.size();
}

namespace {

using gemm_detail::Plan;
using gemm_detail::PlanKey;
using elementwise::blocks_for;
using elementwise::kThreads;

// Largest power of two (at most 256, cuBLASLt's default assumption) dividing the address.
std::uint32_t alignment_of(const void* p) {
  const auto v = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t align = 256;
  while (align > 1 && v % align != 0) align >>= 1;
  return align;
}

void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void* value,
              std::size_t size, const char* what) {
  check_cublas(cublasLtMatmulDescSetAttribute(desc, attr, value, size), what);
}

void set_pref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
              const void* value, std::size_t size, const char* what) {
  check_cublas(cublasLtMatmulPreferenceSetAttribute(pref, attr, value, size), what);
}

struct PreferenceGuard {
  cublasLtMatmulPreference_t pref = nullptr;
  ~PreferenceGuard() {
    if (pref != nullptr) cublasLtMatmulPreferenceDestroy(pref);
  }
};

struct GemmArgs {
  bool trans_a, trans_b;
  std::int64_t m, n, k;
  const void* a;
  std::int64_t lda;
  const void* b;
  std::int64_t ldb;
  void* c;
  std::int64_t ldc;
  GemmOut c_type;
  const void* bias;  // non-null: CUBLASLT_EPILOGUE_BIAS (bf16 bias of length n)
  const void* c_in = nullptr;  // non-null: the GEMM reads beta * C from here and writes `c` (same layout)
};

// Builds (or finds) the plan for `g`. Called with the Impl's mutex held.
Plan& plan_for(Blas::Impl& impl, const GemmArgs& g) {
  const bool with_bias = g.bias != nullptr;
  const std::uint32_t align_a = alignment_of(g.a), align_b = alignment_of(g.b),
                      align_c = g.c_in == nullptr ? alignment_of(g.c)
                                                  : std::min(alignment_of(g.c), alignment_of(g.c_in));
  const std::uint32_t align_bias = with_bias ? alignment_of(g.bias) : 0;
  const PlanKey key = {g.trans_a, g.trans_b, g.m,       g.n,       g.k,       g.lda,     g.ldb,
                       g.ldc,     static_cast<std::int64_t>(g.c_type),   with_bias, align_a,
                       align_b,   align_c,   align_bias};
  auto it = impl.plans.find(key);
  if (it != impl.plans.end()) return *it->second;
  if (impl.plans.size() >= gemm_detail::kMaxPlans) impl.plans.clear();

  auto plan = std::make_unique<Plan>();
  const cudaDataType_t c_type = g.c_type == GemmOut::f32 ? CUDA_R_32F : CUDA_R_16BF;
  check_cublas(cublasLtMatmulDescCreate(&plan->op, CUBLAS_COMPUTE_32F, CUDA_R_32F),
               "cublasLtMatmulDescCreate");
  // Column-major C^T[n,m] = op(B)^T * op(A)^T: cuBLAS's A is our B, cuBLAS's B is our A, and each
  // keeps its own transpose flag (the stored column-major view of a row-major X is X^T).
  const cublasOperation_t op_a = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_desc(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a),
           "cublasLtMatmulDescSetAttribute(TRANSA)");
  set_desc(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b),
           "cublasLtMatmulDescSetAttribute(TRANSB)");
  if (with_bias) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    set_desc(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue),
             "cublasLtMatmulDescSetAttribute(EPILOGUE)");
    const cudaDataType_t bias_type = CUDA_R_16BF;  // = D's type, as cuBLASLt requires here
    set_desc(plan->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type),
             "cublasLtMatmulDescSetAttribute(BIAS_DATA_TYPE)");
    // The heuristic reads the pointer's alignment (the key holds it); gemm() sets it per call.
    set_desc(plan->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof(g.bias),
             "cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
  }
  // Stored column-major views: our B (row-major [k,n], or [n,k] when trans_b) is [n,k] (or [k,n])
  // with ld ldb; our A (row-major [m,k], or [k,m] when trans_a) is [k,m] (or [m,k]) with ld lda;
  // our C (row-major [m,n]) is [n,m] with ld ldc.
  const auto rows_a = static_cast<std::uint64_t>(g.trans_b ? g.k : g.n);
  const auto cols_a = static_cast<std::uint64_t>(g.trans_b ? g.n : g.k);
  const auto rows_b = static_cast<std::uint64_t>(g.trans_a ? g.m : g.k);
  const auto cols_b = static_cast<std::uint64_t>(g.trans_a ? g.k : g.m);
  check_cublas(cublasLtMatrixLayoutCreate(&plan->a, CUDA_R_16BF, rows_a, cols_a, g.ldb),
               "cublasLtMatrixLayoutCreate(A = our B)");
  check_cublas(cublasLtMatrixLayoutCreate(&plan->b, CUDA_R_16BF, rows_b, cols_b, g.lda),
               "cublasLtMatrixLayoutCreate(B = our A)");
  check_cublas(cublasLtMatrixLayoutCreate(&plan->c, c_type, static_cast<std::uint64_t>(g.n),
                                          static_cast<std::uint64_t>(g.m), g.ldc),
               "cublasLtMatrixLayoutCreate(C/D)");

  PreferenceGuard pref;
  check_cublas(cublasLtMatmulPreferenceCreate(&pref.pref), "cublasLtMatmulPreferenceCreate");
  const std::uint64_t workspace = impl.workspace_bytes;
  set_pref(pref.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace),
           "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)");
  // The defaults assume 256-byte aligned operands; sub-matrix pointers (row chunks) may be less.
  set_pref(pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_b, sizeof(align_b),
           "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_A_BYTES)");
  set_pref(pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_a, sizeof(align_a),
           "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_B_BYTES)");
  set_pref(pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof(align_c),
           "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_C_BYTES)");
  set_pref(pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof(align_c),
           "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_D_BYTES)");

  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      impl.handle, plan->op, plan->a, plan->b, plan->c, plan->c, pref.pref, 1, &result, &returned);
  if (status != CUBLAS_STATUS_NOT_SUPPORTED) {
    check_cublas(status, "cublasLtMatmulAlgoGetHeuristic");
  }
  plan->has_algo = status == CUBLAS_STATUS_SUCCESS && returned > 0 &&
                   result.state == CUBLAS_STATUS_SUCCESS &&
                   result.workspaceSize <= impl.workspace_bytes;
  if (plan->has_algo) plan->algo = result.algo;
  Plan& ref = *plan;
  impl.plans.emplace(key, std::move(plan));
  return ref;
}

std::string shape_string(const GemmArgs& g) {
  return std::string("m=") + std::to_string(g.m) + " n=" + std::to_string(g.n) +
         " k=" + std::to_string(g.k) + " trans_a=" + (g.trans_a ? "1" : "0") +
         " trans_b=" + (g.trans_b ? "1" : "0") + " lda=" + std::to_string(g.lda) +
         " ldb=" + std::to_string(g.ldb) + " ldc=" + std::to_string(g.ldc) +
         " c=" + (g.c_type == GemmOut::f32 ? "f32" : "bf16") + (g.bias ? " +bias" : "");
}

void validate(const GemmArgs& g) {
  const bool ok = g.m >= 0 && g.n >= 0 && g.k >= 0 &&
                  g.lda >= std::max<std::int64_t>(1, g.trans_a ? g.m : g.k) &&
                  g.ldb >= std::max<std::int64_t>(1, g.trans_b ? g.k : g.n) &&
                  g.ldc >= std::max<std::int64_t>(1, g.n);
  if (!ok) throw Error("cuda gemm: invalid sizes or leading dimensions (" + shape_string(g) + ")");
}

// C[r, 0:n] = beta * C_in[r, 0:n] (C_in may be C; beta == 0 writes zeros, so NaN garbage in C
// does not survive).
template <typename T>
__global__ void scale_rows_kernel(const T* c_in, T* c, std::int64_t m, std::int64_t n, std::int64_t ldc,
                                  float beta) {
  const std::int64_t total = m * n;
  for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
       idx < total; idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = idx / n;
    const std::int64_t at = r * ldc + (idx - r * n);
    if constexpr (sizeof(T) == 4) {
      c[at] = beta == 0.0f ? 0.0f : c_in[at] * beta;
    } else {
      c[at] = __float2bfloat16_rn(beta == 0.0f ? 0.0f : __bfloat162float(c_in[at]) * beta);
    }
  }
}

// y[r, :] = bias for every row (the bias epilogue's fallback; the GEMM then adds with beta 1).
__global__ void broadcast_rows_kernel(const std::uint16_t* bias, std::uint16_t* y,
                                      std::int64_t rows, std::int64_t cols) {
  const std::int64_t total = rows * cols;
  for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
       idx < total; idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    y[idx] = bias[idx % cols];
  }
}

// The term of dbias[col] = sum_r dy[r, col] (column_sums.cuh reduces it).
struct BiasTerm {
  const __nv_bfloat16* dy;
  std::int64_t cols;
  __device__ float operator()(std::int64_t r, std::int64_t c) const {
    return __bfloat162float(dy[r * cols + c]);
  }
};

// Runs one GEMM. Returns false (having launched nothing) only when g.bias is set and cuBLASLt has
// no algorithm with the bias epilogue; throws when there is none without it.
bool run_gemm(Blas& blas, const GemmArgs& g, float alpha, float beta, void* stream) {
  validate(g);
  if (g.m == 0 || g.n == 0) return true;
  const auto s = static_cast<cudaStream_t>(stream);
  if (g.k == 0) {
    if (g.bias != nullptr) return false;  // the caller's fallback seeds C with the bias
    const bool separate = g.c_in != nullptr && g.c_in != g.c;
    if (beta != 1.0f || separate) {
      const void* from = separate ? g.c_in : g.c;
      if (g.c_type == GemmOut::f32) {
        scale_rows_kernel<<<blocks_for(g.m * g.n), kThreads, 0, s>>>(
            static_cast<const float*>(from), static_cast<float*>(g.c), g.m, g.n, g.ldc, beta);
      } else {
        scale_rows_kernel<<<blocks_for(g.m * g.n), kThreads, 0, s>>>(
            static_cast<const __nv_bfloat16*>(from), static_cast<__nv_bfloat16*>(g.c), g.m, g.n, g.ldc, beta);
      }
      check_last_launch("scale_rows_kernel");
    }
    return true;
  }
  Blas::Impl& impl = blas.impl();
  std::lock_guard<std::mutex> lock(impl.mutex);
  Plan& plan = plan_for(impl, g);
  if (!plan.has_algo) {
    if (g.bias != nullptr) return false;
    throw Error("cuBLASLt heuristic found no algorithm for the bf16 GEMM (" + shape_string(g) +
                ", workspace " + std::to_string(impl.workspace_bytes) + " bytes)");
  }
  if (g.bias != nullptr) {
    set_desc(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof(g.bias),
             "cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
  }
  // cuBLAS's A is our B and its B is our A (see plan_for); C is our c_in (or C), D our C.
  check_cublas(cublasLtMatmul(impl.handle, plan.op, &alpha, g.b, plan.a, g.a, plan.b, &beta,
                              g.c_in != nullptr ? g.c_in : g.c, plan.c, g.c, plan.c, &plan.algo, impl.workspace,
                              impl.workspace_bytes, s),
               "cublasLtMatmul");
  return true;
}

}  // namespace

void gemm(Blas& blas, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
          float alpha, const std::uint16_t* a, std::int64_t lda, const std::uint16_t* b,
          std::int64_t ldb, float beta, void* c, std::int64_t ldc, GemmOut c_type, void* stream) {
  const GemmArgs g{trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, c_type, nullptr};
  run_gemm(blas, g, alpha, beta, stream);
}

void linear_forward(Blas& blas, const std::uint16_t* x, const std::uint16_t* weight,
                    const std::uint16_t* bias, std::uint16_t* y, std::int64_t rows,
                    std::int64_t in, std::int64_t out, void* stream) {
  // Row-major y[rows,out] = x[rows,in] * W[out,in]^T: trans_b, lda = ldb = in, ldc = out.
  GemmArgs g{false, true, rows, out, in, x, in, weight, in, y, out, GemmOut::bf16, bias};
  if (run_gemm(blas, g, 1.0f, 0.0f, stream)) return;
  // No fused-bias algorithm for this shape: seed y with the bias and accumulate onto it.
  if (rows > 0 && out > 0) {
    broadcast_rows_kernel<<<blocks_for(rows * out), kThreads, 0,
                            static_cast<cudaStream_t>(stream)>>>(bias, y, rows, out);
    check_last_launch("broadcast_rows_kernel");
  }
  g.bias = nullptr;
  run_gemm(blas, g, 1.0f, 1.0f, stream);
}

void linear_forward_residual(Blas& blas, const std::uint16_t* x, const std::uint16_t* weight,
                             const std::uint16_t* residual, std::uint16_t* y, std::int64_t rows,
                             std::int64_t in, std::int64_t out, void* stream) {
  // y = 1 * x W^T + 1 * residual: cuBLASLt reads C (the residual) and writes D (y).
  const std::int64_t ld = std::max<std::int64_t>(in, 1);  // in == 0: y = residual
  GemmArgs g{false, true, rows, out, in, x, ld, weight, ld, y, out, GemmOut::bf16, nullptr, residual};
  run_gemm(blas, g, 1.0f, 1.0f, stream);
}

void linear_backward(Blas& blas, const std::uint16_t* dy, const std::uint16_t* x,
                     const std::uint16_t* weight, std::uint16_t* dx, float* dweight_f32,
                     float* dbias_f32, std::int64_t rows, std::int64_t in, std::int64_t out,
                     bool dx_accumulate, DeviceAllocator& allocator, void* stream) {
  if (dx != nullptr) {
    // dx[rows,in] = dy[rows,out] * W[out,in].
    gemm(blas, false, false, rows, in, out, 1.0f, dy, out, weight, in,
         dx_accumulate ? 1.0f : 0.0f, dx, in, GemmOut::bf16, stream);
  }
  if (dweight_f32 != nullptr) {
    // dW[out,in] += dy^T[out,rows] * x[rows,in]: dy is stored [rows,out], hence trans_a.
    gemm(blas, true, false, out, in, rows, 1.0f, dy, out, x, in, 1.0f, dweight_f32, in,
         GemmOut::f32, stream);
  }
  if (dbias_f32 != nullptr) column_sums_accumulate(dy, dbias_f32, rows, out, allocator, stream);
}

std::size_t column_sums_workspace_bytes(std::int64_t rows, std::int64_t cols) {
  return rows <= 0 || cols <= 0 ? 0 : column_scratch_bytes(rows, cols);
}

void column_sums_accumulate(const std::uint16_t* dy, float* dbias, std::int64_t rows,
                            std::int64_t cols, float* workspace, void* stream) {
  column_sums_launch(BiasTerm{reinterpret_cast<const __nv_bfloat16*>(dy), cols}, dbias, rows, cols,
                     workspace, static_cast<cudaStream_t>(stream), "column_sums_accumulate");
}

void column_sums_accumulate(const std::uint16_t* dy, float* dbias, std::int64_t rows,
                            std::int64_t cols, DeviceAllocator& allocator, void* stream) {
  if (rows <= 0 || cols <= 0) return;
  DeviceBuffer scratch(allocator, column_sums_workspace_bytes(rows, cols), stream);
  column_sums_accumulate(dy, dbias, rows, cols, scratch.as<float>(), stream);
}

}  // namespace odc::kernels::cuda
