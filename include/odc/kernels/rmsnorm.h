#pragma once
// RMSNorm (LLaMA): y = x / sqrt(mean(x^2) + eps) * weight, per row of `dim` elements.
#include <cstdint>

namespace odc::kernels::cpu {

// rstd[rows] receives 1/sqrt(mean(x^2)+eps) for the backward pass.
template <typename T>
void rmsnorm_forward(const T* x, const T* weight, T* y, T* rstd, std::int64_t rows,
                     std::int64_t dim, double eps);

// dx[rows,dim] is overwritten when dx_accumulate is false, else added to (residual streams).
// dweight[dim] is always accumulated.
template <typename T>
void rmsnorm_backward(const T* dy, const T* x, const T* weight, const T* rstd, T* dx, T* dweight,
                      std::int64_t rows, std::int64_t dim, bool dx_accumulate);

}  // namespace odc::kernels::cpu
