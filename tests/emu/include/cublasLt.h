#pragma once
// Emulated build only (tests/emu): cuBLASLt as a checked reference matmul. It keeps what the
// caller declares (descriptor attributes with their exact sizes, layouts with their types and
// leading dimensions, the preference's minimum alignments) and rejects what real cuBLASLt would
// reject or silently misread: an attribute of the wrong size, a leading dimension smaller than
// the rows of a column-major layout, operand shapes that do not chain (op(A) m x k, op(B) k x n,
// C and D m x n), types other than bf16 A/B with f32/bf16 C = D, a pointer less aligned than the
// preference promised. D = alpha op(A) op(B) + beta C (+ bias[row] with the bias epilogue),
// column-major, accumulated in double and rounded once to D's type; beta == 0 does not read C.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cuda_runtime.h"

enum cublasStatus_t : int {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
};
enum cublasOperation_t : int { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
enum cublasComputeType_t : int { CUBLAS_COMPUTE_32F = 68 };
enum cublasLtEpilogue_t : int { CUBLASLT_EPILOGUE_DEFAULT = 1, CUBLASLT_EPILOGUE_BIAS = 4 };
enum cublasLtMatmulDescAttributes_t : int {
  CUBLASLT_MATMUL_DESC_TRANSA = 3,
  CUBLASLT_MATMUL_DESC_TRANSB = 4,
  CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
  CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
  CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26,
};
enum cublasLtMatmulPreferenceAttributes_t : int {
  CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,
};

struct cublasLtContext {};
using cublasLtHandle_t = cublasLtContext*;
struct cublasLtMatmulDescOpaque_t {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  cudaDataType_t bias_type = CUDA_R_32F;
  const void* bias = nullptr;
};
using cublasLtMatmulDesc_t = cublasLtMatmulDescOpaque_t*;
struct cublasLtMatrixLayoutOpaque_t {
  cudaDataType_t type;
  std::uint64_t rows, cols;
  std::int64_t ld;
};
using cublasLtMatrixLayout_t = cublasLtMatrixLayoutOpaque_t*;
struct cublasLtMatmulPreferenceOpaque_t {
  std::uint64_t workspace = 0;
  std::uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D: cuBLASLt's default assumption
};
using cublasLtMatmulPreference_t = cublasLtMatmulPreferenceOpaque_t*;
struct cublasLtMatmulAlgo_t {
  std::uint64_t data[8];  // here: the minimum alignments the heuristic was promised
};
struct cublasLtMatmulHeuristicResult_t {
  cublasLtMatmulAlgo_t algo;
  std::size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
};

inline const char* cublasLtGetStatusName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}
inline const char* cublasLtGetStatusString(cublasStatus_t s) {
  return s == CUBLAS_STATUS_SUCCESS ? "success" : "rejected by the emulated cuBLASLt";
}

inline cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
  *h = new cublasLtContext;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute,
                                               cudaDataType_t scale) {
  if (compute != CUBLAS_COMPUTE_32F || scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  *d = new cublasLtMatmulDescOpaque_t{compute, scale};
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete d;
  return CUBLAS_STATUS_SUCCESS;
}

namespace odc_emu::blaslt {
template <typename T>
cublasStatus_t set(T& field, const void* value, std::size_t size) {
  if (size != sizeof(T) || value == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&field, value, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}
}  // namespace odc_emu::blaslt

inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                                     cublasLtMatmulDescAttributes_t attr,
                                                     const void* value, std::size_t size) {
  using odc_emu::blaslt::set;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: return set(d->transa, value, size);
    case CUBLASLT_MATMUL_DESC_TRANSB: return set(d->transb, value, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return set(d->epilogue, value, size);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return set(d->bias, value, size);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return set(d->bias_type, value, size);
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType_t type,
                                                 std::uint64_t rows, std::uint64_t cols,
                                                 std::int64_t ld) {
  if (type != CUDA_R_16BF && type != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (ld < static_cast<std::int64_t>(rows) || ld < 1) return CUBLAS_STATUS_INVALID_VALUE;
  *l = new cublasLtMatrixLayoutOpaque_t{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete l;
  return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
  *p = new cublasLtMatmulPreferenceOpaque_t;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                           cublasLtMatmulPreferenceAttributes_t attr,
                                                           const void* value, std::size_t size) {
  using odc_emu::blaslt::set;
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return set(p->workspace, value, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return set(p->align[0], value, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return set(p->align[1], value, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return set(p->align[2], value, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return set(p->align[3], value, size);
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

namespace odc_emu::blaslt {
// Rows / columns of op(X) for a stored layout.
inline std::uint64_t op_rows(const cublasLtMatrixLayoutOpaque_t& l, cublasOperation_t op) {
  return op == CUBLAS_OP_N ? l.rows : l.cols;
}
inline std::uint64_t op_cols(const cublasLtMatrixLayoutOpaque_t& l, cublasOperation_t op) {
  return op == CUBLAS_OP_N ? l.cols : l.rows;
}
inline cublasStatus_t check_shapes(const cublasLtMatmulDescOpaque_t& d, const cublasLtMatrixLayoutOpaque_t& a,
                                   const cublasLtMatrixLayoutOpaque_t& b, const cublasLtMatrixLayoutOpaque_t& c,
                                   const cublasLtMatrixLayoutOpaque_t& dd) {
  if (a.type != CUDA_R_16BF || b.type != CUDA_R_16BF || c.type != dd.type) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (op_rows(a, d.transa) != c.rows || op_cols(b, d.transb) != c.cols ||
      op_cols(a, d.transa) != op_rows(b, d.transb) || c.rows != dd.rows || c.cols != dd.cols ||
      c.ld != dd.ld) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (d.epilogue == CUBLASLT_EPILOGUE_BIAS && d.bias_type != dd.type) return CUBLAS_STATUS_NOT_SUPPORTED;
  return CUBLAS_STATUS_SUCCESS;
}
inline double load(const void* base, cudaDataType_t type, std::int64_t index) {
  if (type == CUDA_R_32F) return static_cast<const float*>(base)[index];
  return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[index]);
}
inline bool aligned(const void* p, std::uint64_t align) {
  return align == 0 || reinterpret_cast<std::uintptr_t>(p) % align == 0;
}
}  // namespace odc_emu::blaslt

inline cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
    cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dd, cublasLtMatmulPreference_t p, int requested,
    cublasLtMatmulHeuristicResult_t* results, int* returned) {
  if (h == nullptr || d == nullptr || p == nullptr || requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
  const cublasStatus_t s = odc_emu::blaslt::check_shapes(*d, *a, *b, *c, *dd);
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  results[0] = cublasLtMatmulHeuristicResult_t{};
  for (int i = 0; i < 4; ++i) results[0].algo.data[i] = p->align[i];
  results[0].state = CUBLAS_STATUS_SUCCESS;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void* alpha,
                                     const void* A, cublasLtMatrixLayout_t a, const void* B,
                                     cublasLtMatrixLayout_t b, const void* beta, const void* C,
                                     cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t dd,
                                     const cublasLtMatmulAlgo_t* algo, void* workspace,
                                     std::size_t workspace_bytes, cudaStream_t) {
  namespace bl = odc_emu::blaslt;
  if (h == nullptr || algo == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  const cublasStatus_t s = bl::check_shapes(*d, *a, *b, *c, *dd);
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  if (!bl::aligned(A, algo->data[0]) || !bl::aligned(B, algo->data[1]) ||
      !bl::aligned(C, algo->data[2]) || !bl::aligned(D, algo->data[3])) {
    return CUBLAS_STATUS_INVALID_VALUE;  // less aligned than the heuristic was told
  }
  const bool bias = d->epilogue == CUBLASLT_EPILOGUE_BIAS;
  if (bias && d->bias == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  const double al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  const std::int64_t m = static_cast<std::int64_t>(c->rows), n = static_cast<std::int64_t>(c->cols);
  const std::int64_t k = static_cast<std::int64_t>(bl::op_cols(*a, d->transa));
  // Element (i, j) of op(X), column-major with leading dimension ld.
  auto at = [](const void* x, const cublasLtMatrixLayoutOpaque_t& l, cublasOperation_t op, std::int64_t i,
               std::int64_t j) {
    return op == CUBLAS_OP_N ? bl::load(x, l.type, i + j * l.ld) : bl::load(x, l.type, j + i * l.ld);
  };
  std::vector<double> out(static_cast<std::size_t>(m * n));
  for (std::int64_t j = 0; j < n; ++j) {
    for (std::int64_t i = 0; i < m; ++i) {
      double acc = 0.0;
      for (std::int64_t q = 0; q < k; ++q) acc += at(A, *a, d->transa, i, q) * at(B, *b, d->transb, q, j);
      double v = al * acc;
      if (be != 0.0) v += be * bl::load(C, c->type, i + j * c->ld);
      if (bias) v += bl::load(d->bias, d->bias_type, i);
      out[static_cast<std::size_t>(i + j * m)] = v;
    }
  }
  for (std::int64_t j = 0; j < n; ++j) {  // written after all reads: D may alias C
    for (std::int64_t i = 0; i < m; ++i) {
      const double v = out[static_cast<std::size_t>(i + j * m)];
      if (dd->type == CUDA_R_32F) {
        static_cast<float*>(D)[i + j * dd->ld] = static_cast<float>(v);
      } else {
        static_cast<__nv_bfloat16*>(D)[i + j * dd->ld] = __float2bfloat16_rn(static_cast<float>(v));
      }
    }
  }
  (void)workspace;
  (void)workspace_bytes;
  return CUBLAS_STATUS_SUCCESS;
}
