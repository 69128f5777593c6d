#pragma once
// Token embedding lookup. Token ids are validated by the data layer (< vocab) before they reach
// here; the kernels check again only in debug builds.
#include <cstdint>

namespace odc::kernels::cpu {

// out[t, :] = table[ids[t], :]
template <typename T>
void embedding_forward(const std::int32_t* ids, const T* table, T* out, std::int64_t tokens,
                       std::int64_t dim);

// dtable[ids[t], :] += dout[t, :]
template <typename T>
void embedding_backward(const std::int32_t* ids, const T* dout, T* dtable, std::int64_t tokens,
                        std::int64_t dim);

}  // namespace odc::kernels::cpu
