#include "odc/kernels/embedding.h"

#include <cstring>

#include "odc/core/error.h"

namespace odc::kernels::cpu {

template <typename T>
void embedding_forward(const std::int32_t* ids, const T* table, T* out, std::int64_t tokens,
                       std::int64_t dim) {
  for (std::int64_t t = 0; t < tokens; ++t) {
#ifndef NDEBUG
    ODC_CHECK(ids[t] >= 0, "token {} has negative id {}", t, ids[t]);
#endif
    std::memcpy(out + t * dim, table + std::int64_t(ids[t]) * dim, sizeof(T) * dim);
  }
}

template <typename T>
void embedding_backward(const std::int32_t* ids, const T* dout, T* dtable, std::int64_t tokens,
                        std::int64_t dim) {
  for (std::int64_t t = 0; t < tokens; ++t) {
#ifndef NDEBUG
    ODC_CHECK(ids[t] >= 0, "token {} has negative id {}", t, ids[t]);
#endif
    T* row = dtable + std::int64_t(ids[t]) * dim;
    const T* grad = dout + t * dim;
    for (std::int64_t i = 0; i < dim; ++i) row[i] += grad[i];
  }
}

template void embedding_forward<float>(const std::int32_t*, const float*, float*, std::int64_t,
                                       std::int64_t);
template void embedding_forward<double>(const std::int32_t*, const double*, double*, std::int64_t,
                                        std::int64_t);
template void embedding_backward<float>(const std::int32_t*, const float*, float*, std::int64_t,
                                        std::int64_t);
template void embedding_backward<double>(const std::int32_t*, const double*, double*, std::int64_t,
                                         std::int64_t);

}  // namespace odc::kernels::cpu
